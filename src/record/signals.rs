//! Ctrl-C and SIGTERM while recording: the first asks for a clean stop, the second ends at once.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

static RECEIVED: AtomicU32 = AtomicU32::new(0);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Whether the last signal was sent to utrace alone (kill), rather than by the terminal to the
/// whole foreground process group, which the traced command has then received already.
static SENT_TO_UTRACE_ONLY: AtomicU32 = AtomicU32::new(0);

const HANDLED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn on_signal(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    SENT_TO_UTRACE_ONLY.store(
        u32::from(code == libc::SI_USER || code == libc::SI_QUEUE),
        Ordering::SeqCst,
    );
    LAST_SIGNAL.store(signal, Ordering::SeqCst);
    RECEIVED.fetch_add(1, Ordering::SeqCst);
}

/// Installs the handlers. Handlers (unlike ignored signals) are reset by `exec`, so the traced
/// command starts with the dispositions utrace was given.
pub fn install() -> std::io::Result<()> {
    for signal in HANDLED {
        // SAFETY: a zeroed sigaction is a valid starting value; the handler is async-signal-safe
        // (atomics only).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&raw mut action.sa_mask);
            if libc::sigaction(signal, &raw const action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// A signal that arrived since the last look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    pub signal: libc::c_int,
    /// How many stop signals arrived in all.
    pub count: u32,
    /// True when the traced command did not get it too (see [`SENT_TO_UTRACE_ONLY`]).
    pub forward: bool,
}

impl Received {
    /// What a user who sent this first signal to a command that runs on should know: where it
    /// went, and how to stop recording (`program` with pid `pid`).
    pub fn hint(&self, program: &str, pid: u32) -> String {
        let name = match self.signal {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            libc::SIGHUP => "SIGHUP",
            _ => "the signal",
        };
        let again = match self.signal {
            libc::SIGINT => "press Ctrl-C again".to_owned(),
            _ => format!("send {name} again"),
        };
        let went = match self.forward {
            true => format!("sent {name} to {program} (pid {pid})"),
            false => format!("{program} (pid {pid}) got {name} from the terminal"),
        };
        format!("{went}; it runs on: {again} to stop recording ({program} then goes on untraced)")
    }
}

/// Tracks which signals the recording loop has already acted on.
#[derive(Default)]
pub struct SignalWatch {
    seen: u32,
}

impl SignalWatch {
    pub fn take(&mut self) -> Option<Received> {
        let count = RECEIVED.load(Ordering::SeqCst);
        if count == self.seen {
            return None;
        }
        self.seen = count;
        Some(Received {
            signal: LAST_SIGNAL.load(Ordering::SeqCst),
            count,
            forward: SENT_TO_UTRACE_ONLY.load(Ordering::SeqCst) != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_says_where_the_signal_went_and_how_to_stop() {
        let received = |signal, forward| Received {
            signal,
            count: 1,
            forward,
        };
        assert_eq!(
            received(libc::SIGINT, true).hint("busy", 42),
            "sent SIGINT to busy (pid 42); it runs on: press Ctrl-C again to stop recording \
             (busy then goes on untraced)"
        );
        assert_eq!(
            received(libc::SIGINT, false).hint("busy", 42),
            "busy (pid 42) got SIGINT from the terminal; it runs on: press Ctrl-C again to stop \
             recording (busy then goes on untraced)"
        );
        assert!(received(libc::SIGTERM, true)
            .hint("busy", 42)
            .contains("send SIGTERM again to stop recording"));
    }
}
