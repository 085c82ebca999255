//! The log callback receives kt's messages (from any thread), and replacing it frees the old closure only once kt
//! has stopped calling it. A test binary of its own: the callback is process-wide.
use std::sync::{Arc, Mutex};

#[test]
fn log_callback_receives_kts_messages_until_cleared() {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    kt::set_log_callback(
        kt::sys::KT_LOG_ERROR,
        Some(Box::new(move |_, m: &str| sink.lock().unwrap().push(m.to_string()))),
    );
    let threads: Vec<_> =
        (0..3).map(|_| std::thread::spawn(|| kt::quantize(kt::types::Q8_0, &[1.0; 33], 33))).collect();
    for t in threads {
        assert!(t.join().unwrap().is_err());
    }
    assert_eq!(lines.lock().unwrap().iter().filter(|l| l.contains("block size")).count(), 3, "{:?}", lines);
    kt::set_log_callback(kt::sys::KT_LOG_ERROR, None);
    assert!(kt::quantize(kt::types::Q8_0, &[1.0; 33], 33).is_err());
    assert_eq!(lines.lock().unwrap().len(), 3);
    assert_eq!(Arc::strong_count(&lines), 1); // the replaced closure (holding a clone) was freed
}
