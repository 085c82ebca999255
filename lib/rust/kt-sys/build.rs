// Links libkt.a as pkg-config describes the installed kt: `pkg-config --static --libs kt` gives the directory of
// libkt.a and what it needs (hwloc, the C++ runtime, CUDA's static runtime when built with CUDA). pkg-config is run
// as a program (no registry crates); PKG_CONFIG_PATH points it at a kt installed outside the system's paths.
//
// KT_SYS_DYLIB=1 links libkt.so instead (then found at run time through the loader's path).
use std::env;
use std::process::Command;

fn pkg_config(args: &[&str]) -> String {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(&program).args(args).arg("kt").output().unwrap_or_else(|e| {
        panic!("kt-sys: cannot run {}: {} (install pkg-config)", program, e);
    });
    if !out.status.success() {
        panic!(
            "kt-sys: `{} {} kt` failed: {}\nInstall kt (cmake --install) and set PKG_CONFIG_PATH to its lib/pkgconfig.",
            program,
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout).expect("pkg-config printed non-UTF-8")
}

fn main() {
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-env-changed=KT_SYS_DYLIB");
    let dylib = env::var("KT_SYS_DYLIB").map(|v| v == "1").unwrap_or(false);
    let libs = pkg_config(if dylib { &["--libs"] } else { &["--static", "--libs"] });
    for flag in libs.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={}", dir);
        } else if let Some(name) = flag.strip_prefix("-l") {
            if name == "kt" {
                println!("cargo:rustc-link-lib={}=kt", if dylib { "dylib" } else { "static" });
            } else {
                println!("cargo:rustc-link-lib={}", name);
            }
        } else {
            println!("cargo:rustc-link-arg={}", flag);
        }
    }
    let cflags = pkg_config(&["--cflags"]);
    if let Some(include) = cflags.split_whitespace().find_map(|f| f.strip_prefix("-I")) {
        println!("cargo:include={}", include); // DEP_KT_INCLUDE for crates that build C against kt.h
    }
}
