//! Waiting for an exclusive `flock` on a file [`Tree::open_lock`](super::Tree::open_lock)
//! opened: the one loop that waits, saying so once, and gives up on Ctrl-C
//! (exit 130). Must not decide what to lock.
use std::time::Duration;

use anyhow::Result;

/// Lock `f` exclusively, waiting while another process holds it; `waiting`
/// runs once, when the first try finds it held. `what` names it in errors.
pub fn lock_exclusive(f: &std::fs::File, what: &std::path::Path, waiting: impl FnOnce()) -> Result<()> {
    let mut waiting = Some(waiting);
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {
                if let Some(w) = waiting.take() {
                    w();
                }
                crate::error::check_interrupted()?;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(anyhow::Error::new(e).context(format!("locking {}", what.display())))
            }
        }
    }
}
