//! The writes into the traced process's stack that the shadow stack asks for
//! (`src/bpf/shadow.bpf.h`): return addresses given back to the frames an unwinder is about to
//! walk, and the uretprobe trampoline put back into those still alive after it. The BPF program
//! paused the thread (or stopped the process) before sending them; the recorder writes them with
//! `process_vm_writev` and then lets it go on.

use std::io;
use std::time::{Duration, Instant};

/// A `struct stack_write_request` from the `stack_writes` ring buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct StackWriteRequest {
    /// The process (tgid) whose memory is written.
    pub pid: u32,
    /// The thread that waits paused until they are written.
    pub tid: u32,
    /// (address, 8-byte value) pairs.
    pub writes: Vec<(u64, u64)>,
}

/// A record of the `stack_writes` ring buffer that is not a request the BPF programs write.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed stack write request ({0} bytes)")]
pub struct MalformedRequest(pub usize);

/// Header: pid, count, tid and a reserved word, 4 bytes each; then (address, value) pairs of 8
/// bytes each.
const HEADER_BYTES: usize = 16;
const WRITE_BYTES: usize = 16;

impl StackWriteRequest {
    /// Reads a request as the BPF program laid it out (little-endian x86_64).
    pub fn parse(bytes: &[u8]) -> Result<StackWriteRequest, MalformedRequest> {
        let malformed = || MalformedRequest(bytes.len());
        let word = |at: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
        };
        let quad = |at: usize| -> Option<u64> {
            Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        let pid = word(0).ok_or_else(malformed)?;
        let count = word(4).ok_or_else(malformed)? as usize;
        let tid = word(8).ok_or_else(malformed)?;
        let needed = count
            .checked_mul(WRITE_BYTES)
            .and_then(|body| body.checked_add(HEADER_BYTES))
            .ok_or_else(malformed)?;
        if bytes.len() < needed {
            return Err(malformed());
        }
        let writes = (0..count)
            .map(|i| {
                let at = HEADER_BYTES + i * WRITE_BYTES;
                Some((quad(at)?, quad(at + 8)?))
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(malformed)?;
        Ok(StackWriteRequest { pid, tid, writes })
    }

    /// Writes every value at its address in the process, all or nothing as far as the kernel
    /// lets it say.
    pub fn apply(&self) -> io::Result<()> {
        let local: Vec<libc::iovec> = self
            .writes
            .iter()
            .map(|(_, value)| libc::iovec {
                iov_base: (value as *const u64).cast_mut().cast(),
                iov_len: 8,
            })
            .collect();
        let remote: Vec<libc::iovec> = self
            .writes
            .iter()
            .map(|&(address, _)| libc::iovec {
                iov_base: address as *mut libc::c_void,
                iov_len: 8,
            })
            .collect();
        // SAFETY: the local iovecs point at the live u64 values of `self.writes`, only read from;
        // the remote ones name memory of the other process, which the kernel checks.
        let written = unsafe {
            libc::process_vm_writev(
                self.pid as libc::pid_t,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        if written < 0 {
            return Err(io::Error::last_os_error());
        }
        if written as usize != self.writes.len() * 8 {
            return Err(io::Error::other(format!(
                "wrote {written} of {} bytes",
                self.writes.len() * 8
            )));
        }
        Ok(())
    }
}

/// The writes that give back the return addresses the kernel replaced with its trampoline
/// (`trampoline`) in the frames still running, per thread (`replaced`: slot, original), for a
/// process utrace leaves running: once the probes are gone, nothing would restore them for an
/// exception that unwinds through such a frame. A slot that no longer holds the trampoline is
/// left alone. The threads must be stopped.
pub fn restore_at_detach(
    pid: u32,
    trampoline: u64,
    replaced: &[(u32, Vec<(u64, u64)>)],
) -> StackWriteRequest {
    let mut writes = Vec::new();
    for (_, frames) in replaced {
        for &(slot, original) in frames {
            if read_word(pid, slot).is_ok_and(|now| now == trampoline) {
                writes.push((slot, original));
            }
        }
    }
    StackWriteRequest {
        pid,
        tid: 0,
        writes,
    }
}

/// The 8 bytes at `address` in process `pid`.
fn read_word(pid: u32, address: u64) -> io::Result<u64> {
    let mut word = 0u64;
    let local = libc::iovec {
        iov_base: (&raw mut word).cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: the local iovec points at `word`, 8 bytes; the kernel checks the remote one.
    let read = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    match read {
        8 => Ok(word),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Which stops [`wait_until_every_thread_stops`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// A stop by a signal or by ptrace.
    AnyStop,
    /// A stop by a signal, no thread left in a ptrace stop: once its tracer has gone, a thread
    /// still in one (`t`) has yet to run and take the signal it stopped for.
    SignalStop,
}

/// Waits until every thread of process `pid` is stopped the `wanted` way, for at most `limit`:
/// the threads whose stacks are written must not run meanwhile. Whether they are (false when a
/// thread still runs at the end); `None` when the process is gone (exited, maybe not reaped).
pub fn wait_until_every_thread_stops(pid: u32, wanted: Stopped, limit: Duration) -> Option<bool> {
    let started = Instant::now();
    loop {
        match every_thread_stopped(pid, wanted) {
            Some(true) => return Some(true),
            None => return None,
            Some(false) if started.elapsed() >= limit => return Some(false),
            Some(false) => std::thread::sleep(Duration::from_micros(200)),
        }
    }
}

/// Whether every live thread of `pid` is stopped the `wanted` way; `None` when the process is
/// gone.
fn every_thread_stopped(pid: u32, wanted: Stopped) -> Option<bool> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // The state follows the command name, which may hold spaces and parentheses.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        match state {
            Some('T') => any = true,
            Some('t') if wanted == Stopped::AnyStop => any = true,
            Some('Z' | 'X') | None => {}
            Some(_) => return Some(false),
        }
    }
    any.then_some(true)
}

/// Where the kernel's uretprobe trampoline is in process `pid`: the start of its `[uprobes]`
/// mapping.
pub fn trampoline_address(pid: u32) -> Option<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let line = maps.lines().find(|line| line.ends_with("[uprobes]"))?;
    u64::from_str_radix(line.split('-').next()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_bytes(pid: u32, count: u32, writes: &[(u64, u64)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend(pid.to_ne_bytes());
        bytes.extend(count.to_ne_bytes());
        bytes.extend((pid + 1).to_ne_bytes());
        bytes.extend(0u32.to_ne_bytes());
        for (address, value) in writes {
            bytes.extend(address.to_ne_bytes());
            bytes.extend(value.to_ne_bytes());
        }
        bytes
    }

    #[test]
    fn parses_the_writes_in_use_and_ignores_the_rest_of_the_record() {
        let mut bytes = request_bytes(42, 2, &[(0x7ff0, 1), (0x7ff8, 2), (0xdead, 3)]);
        bytes.extend([0u8; 32]);
        assert_eq!(
            StackWriteRequest::parse(&bytes),
            Ok(StackWriteRequest {
                pid: 42,
                tid: 43,
                writes: vec![(0x7ff0, 1), (0x7ff8, 2)],
            })
        );
    }

    #[test]
    fn short_or_overflowing_records_are_malformed() {
        assert_eq!(
            StackWriteRequest::parse(&[1, 2, 3]),
            Err(MalformedRequest(3))
        );
        let short = request_bytes(1, 3, &[(1, 1), (2, 2)]);
        assert_eq!(
            StackWriteRequest::parse(&short),
            Err(MalformedRequest(short.len()))
        );
        let huge = request_bytes(1, u32::MAX, &[]);
        assert!(StackWriteRequest::parse(&huge).is_err());
    }

    /// Writes into this very process: what the recorder does to the traced one.
    #[test]
    fn applies_the_writes_to_the_process_memory() {
        let targets = [0u64; 2];
        let request = StackWriteRequest {
            pid: std::process::id(),
            tid: 0,
            writes: vec![
                (targets.as_ptr() as u64, 0x1122),
                (targets[1..].as_ptr() as u64, 0x3344),
            ],
        };
        request.apply().unwrap();
        // SAFETY: reads the live array the kernel just wrote to behind the compiler's back.
        let after = unsafe { std::ptr::read_volatile(&targets) };
        assert_eq!(after, [0x1122, 0x3344]);
    }
}
