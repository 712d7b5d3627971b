//! What an operator should know, on stderr: the stack started, a call the
//! shim does not support (once per distinct call).

/// One line on stderr, prefixed, for what an operator should know (the
/// stack started, a call the shim does not support).
pub(crate) fn log_line(msg: &str) {
    eprintln!("zerosplit exec: {msg}");
}

/// Logs an unsupported call once per distinct message.
pub(crate) fn unsupported(what: String) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if seen.len() < 256 && !seen.contains(&what) {
        log_line(&format!("unsupported: {what}"));
        seen.push(what);
    }
}
