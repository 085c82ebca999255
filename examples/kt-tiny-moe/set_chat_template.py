"""Writes chat_template.jinja into both kt-tiny-moe GGUF files as tokenizer.chat_template, without retraining.

Every other key is carried over with its type, in file order (the template key is replaced where it is, or added
last, which is where export.py puts it). Tensors are written the way export.py writes them: the F32 file's
tensors as they are (the trained weights, exactly), the Q8_0 file's matrices quantized again from those F32
values by kt_quantize, its norms and routers copied as F32. The script then checks, tensor by tensor, that the
bytes of each new file equal the old file's, so the weights are untouched and a re-export from the checkpoint
would give the same files.

    cmake -S . -B build -DKT_BUILD_SHARED=ON && cmake --build build -j2 --target kt_shared
    /usr/bin/python3 examples/kt-tiny-moe/set_chat_template.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "lib", "python"))

import kt  # noqa: E402

KEY = "tokenizer.chat_template"
TEMPLATE_FILE = os.path.join(HERE, "chat_template.jinja")
F32 = os.path.join(HERE, "kt-tiny-moe.f32.gguf")
Q8_0 = os.path.join(HERE, "kt-tiny-moe.q8_0.gguf")


def chat_template():
    with open(TEMPLATE_FILE, encoding="utf-8") as f:
        return f.read()


def copy_metadata(src, w, template):
    keys = src.keys()
    for key in keys:
        if key == KEY:
            w.set_string(KEY, template)
            continue
        t, et = src.meta_type(key)
        value = src.meta(key)
        if t == kt.META_ARRAY:
            if et == kt.META_STRING:
                w.set_array_string(key, value)
            else:
                w.set_array(key, et, value)
        elif t == kt.META_STRING:
            w.set_string(key, value)
        elif t == kt.META_BOOL:
            w.set_bool(key, value)
        elif t in (kt.META_FLOAT32, kt.META_FLOAT64):
            w.set_float(key, t, value)
        else:
            w.set_int(key, t, value)
    if KEY not in keys:
        w.set_string(KEY, template)


def raw_bytes(path, info):
    with open(path, "rb") as f:
        f.seek(info.file_offset)
        return f.read(info.n_bytes)


def rewrite(path, weights, template):
    """Rewrites `path` with the template; tensor values come from `weights` (the F32 model), stored as `path`
    stores them."""
    tmp = path + ".new"
    with kt.Model(path) as old:
        w = kt.GgufWriter()
        copy_metadata(old, w, template)
        for info in old.tensors():
            w.add_tensor(info.name, weights.tensor_f32(info.name), info.type)
        w.write(tmp)
        with kt.Model(tmp) as new:
            for info in old.tensors():
                if raw_bytes(path, info) != raw_bytes(tmp, new.tensor_info(info.name)):
                    os.remove(tmp)
                    raise SystemExit(f"{path}: tensor {info.name} would change; nothing written")
            assert new.meta(KEY) == template
            assert [k for k in new.keys() if k != KEY] == [k for k in old.keys() if k != KEY]
    os.replace(tmp, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes): {KEY} set, every tensor byte-identical")


def main():
    template = chat_template()
    with kt.Model(F32) as weights:
        # The Q8_0 file first: its tensors are derived from the F32 file, which must still be the original.
        rewrite(Q8_0, weights, template)
    with kt.Model(F32) as weights:
        rewrite(F32, weights, template)


if __name__ == "__main__":
    main()
