//! What the running kernel offers the probes, found once by trying each thing the way libbpf's
//! own feature probes do, or by looking it up in the kernel's BTF.

use std::ffi::c_ulong;
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use libbpf_rs::btf::types::Func;
use libbpf_rs::btf::Btf;
use libbpf_rs::libbpf_sys as sys;

/// Whether the kernel has a feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    Yes,
    No,
    /// The probe could not tell: the kernel refused to run it (an errno), as it does a process
    /// without CAP_BPF, which then cannot load the programs either.
    Unknown(i32),
}

impl Support {
    /// Only a feature known to be missing counts as missing: where the probe could not tell,
    /// loading or attaching says what is wrong.
    pub fn missing(self) -> bool {
        self == Support::No
    }
}

impl fmt::Display for Support {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Support::Yes => f.write_str("yes"),
            Support::No => f.write_str("no"),
            Support::Unknown(libc::EPERM) => f.write_str("unknown (EPERM)"),
            Support::Unknown(libc::EACCES) => f.write_str("unknown (EACCES)"),
            Support::Unknown(libc::ENOENT) => f.write_str("unknown (not in the kernel's BTF)"),
            Support::Unknown(errno) => write!(f, "unknown (errno {errno})"),
        }
    }
}

/// The kernel's features the probes use or will use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelFeatures {
    /// `uprobe_multi` links (Linux 6.6) with a working process filter: many probes of one file
    /// attached at once, each with its own cookie.
    pub uprobe_multi: Support,
    /// `uprobe.session` links: one program at a function's entry and, if it asks, its return.
    pub uprobe_session: Support,
    /// The `bpf_session_is_return` kfunc, which a session program needs.
    pub session_is_return: Support,
    /// The `bpf_send_signal_task` kfunc, which stops a forked child under `--follow`.
    pub send_signal_task: Support,
    /// BPF ring buffers, which carry the events.
    pub ring_buffer: Support,
    /// BPF cookies for uprobes (`bpf_get_attach_cookie`, Linux 5.15): a probe's program learns
    /// which function it was hit for.
    pub cookies: Support,
    /// `bpf_loop` (5.17): loops whose body is verified once.
    pub bpf_loop: Support,
    /// `bpf_find_vma` (5.17): the file and offset of an address, for `--stack`'s callers.
    pub find_vma: Support,
    /// Open-coded iterators (`bpf_iter_num_*` kfuncs, 6.4): loops verified fastest.
    pub iterators: Support,
    /// fentry/fexit programs (BPF trampolines).
    pub fentry: Support,
    /// kprobes (`CONFIG_KPROBES`): a kernel function's entry and return, one probe each.
    pub kprobes: Support,
    /// `kprobe_multi` links (Linux 5.18, on fprobe): many kernel functions' entries, or
    /// returns, attached at once, each with its own cookie.
    pub kprobe_multi: Support,
    /// How long probing took.
    pub probe_time: Duration,
}

impl KernelFeatures {
    /// Probes the running kernel. Each probe loads a two-instruction program or a map and
    /// releases it at once.
    pub fn probe() -> KernelFeatures {
        let started = Instant::now();
        let btf = Btf::from_vmlinux().ok();
        let function = |name: &str| btf.as_ref()?.type_by_name::<Func>(name);
        // Without the kernel's BTF no kfunc can be resolved, nor fentry attached.
        let kfunc = |name| match (&btf, function(name)) {
            (None, _) => Support::Unknown(libc::ENOENT),
            (Some(_), found) => bool_support(found.is_some()),
        };
        KernelFeatures {
            uprobe_multi: uprobe_multi_link(),
            uprobe_session: uprobe_link(sys::BPF_TRACE_UPROBE_SESSION),
            session_is_return: kfunc("bpf_session_is_return"),
            send_signal_task: kfunc("bpf_send_signal_task"),
            ring_buffer: ring_buffer(),
            cookies: uprobe_helper(sys::BPF_FUNC_get_attach_cookie),
            bpf_loop: uprobe_helper(sys::BPF_FUNC_loop),
            find_vma: uprobe_helper(sys::BPF_FUNC_find_vma),
            iterators: kfunc("bpf_iter_num_new"),
            // A function of the kernel's that only BPF_PROG_TEST_RUN calls.
            fentry: match function("bpf_fentry_test1") {
                Some(target) => fentry_link(target.type_id().into()),
                None => Support::Unknown(libc::ENOENT),
            },
            kprobes: kprobes(),
            kprobe_multi: kprobe_multi_link(),
            probe_time: started.elapsed(),
        }
    }
}

impl fmt::Display for KernelFeatures {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "uprobe_multi {}, uprobe sessions {}, ring buffer {}, fentry {}, kprobes {}, \
             kprobe_multi {}; helpers bpf_get_attach_cookie {}, bpf_loop {}, bpf_find_vma {}; \
             kfuncs bpf_session_is_return {}, bpf_send_signal_task {}, open-coded iterators {}",
            self.uprobe_multi,
            self.uprobe_session,
            self.ring_buffer,
            self.fentry,
            self.kprobes,
            self.kprobe_multi,
            self.cookies,
            self.bpf_loop,
            self.find_vma,
            self.session_is_return,
            self.send_signal_task,
            self.iterators
        )
    }
}

fn bool_support(present: bool) -> Support {
    match present {
        true => Support::Yes,
        false => Support::No,
    }
}

/// What an errno of a probe says: a refusal for want of privileges tells nothing of the
/// feature; any other error means it is not there.
fn support_after(errno: i32) -> Support {
    match errno {
        libc::EPERM | libc::EACCES => Support::Unknown(errno),
        _ => Support::No,
    }
}

/// Whether `uprobe_multi` links work, process filter included, as libbpf finds out
/// (`probe_uprobe_multi_link`): the first kernels filtered by thread, not by process.
fn uprobe_multi_link() -> Support {
    match uprobe_link(sys::BPF_TRACE_UPROBE_MULTI) {
        Support::Yes => {}
        other => return other,
    }
    // With the fix, an invalid pid fails before the path is looked at.
    match try_uprobe_link(sys::BPF_TRACE_UPROBE_MULTI, u32::MAX) {
        Err(libc::EINVAL) => Support::Yes,
        Err(errno) => support_after(errno),
        Ok(()) => Support::No,
    }
}

/// Whether links of `attach_type` (a kind of `uprobe_multi` link) can be made: the kernel
/// takes the request and only then finds that `/` is no file to probe.
fn uprobe_link(attach_type: sys::bpf_attach_type) -> Support {
    match try_uprobe_link(attach_type, 0) {
        Err(libc::EBADF) => Support::Yes,
        Err(errno) => support_after(errno),
        Ok(()) => Support::No,
    }
}

/// Links a program that only returns, made to be attached as `attach_type`, at offset 0 of `/`
/// filtered to `pid`: the errno the kernel answers (a link made, which it never should be, is
/// released and reported as `Ok`).
fn try_uprobe_link(attach_type: sys::bpf_attach_type, pid: u32) -> Result<(), i32> {
    let program = load_return_zero(sys::BPF_PROG_TYPE_KPROBE, attach_type, 0)?;
    let offset: c_ulong = 0;
    let mut opts = sys::bpf_link_create_opts {
        sz: size_of::<sys::bpf_link_create_opts>() as _,
        ..Default::default()
    };
    opts.__bindgen_anon_1.uprobe_multi = sys::bpf_link_create_opts__bindgen_ty_1__bindgen_ty_3 {
        path: c"/".as_ptr(),
        offsets: &offset,
        cnt: 1,
        pid,
        ..Default::default()
    };
    link(&program, attach_type, &opts)
}

/// Whether uprobe programs may call `helper`, as libbpf finds out by loading one that does.
fn uprobe_helper(helper: sys::bpf_func_id) -> Support {
    // SAFETY: no options; libbpf loads and releases a program, and returns 1, 0 or -errno.
    let found = unsafe {
        sys::libbpf_probe_bpf_helper(sys::BPF_PROG_TYPE_KPROBE, helper, std::ptr::null())
    };
    match found {
        1 => Support::Yes,
        0 => Support::No,
        error => support_after(-error),
    }
}

/// Whether a ring buffer (of one page) can be made. Not libbpf's probe, which takes a refusal
/// for a missing feature.
fn ring_buffer() -> Support {
    // SAFETY: no name, no options; bpf_map_create returns a new descriptor or -errno.
    let map = unsafe {
        sys::bpf_map_create(
            sys::BPF_MAP_TYPE_RINGBUF,
            std::ptr::null(),
            0,
            0,
            4096,
            std::ptr::null(),
        )
    };
    if map < 0 {
        return support_after(-map);
    }
    // SAFETY: a descriptor libbpf just opened, owned by nobody else.
    drop(unsafe { OwnedFd::from_raw_fd(map) });
    Support::Yes
}

/// Whether the kernel has kprobes: their perf event type, which libbpf attaches through, or
/// else the tracefs file it falls back on.
fn kprobes() -> Support {
    let places = [
        "/sys/bus/event_source/devices/kprobe/type",
        "/sys/kernel/tracing/kprobe_events",
        "/sys/kernel/debug/tracing/kprobe_events",
    ];
    bool_support(
        places
            .iter()
            .any(|place| std::path::Path::new(place).exists()),
    )
}

/// Whether `kprobe_multi` links can be made: the kernel takes the request and only then finds
/// that no function has the name asked for.
fn kprobe_multi_link() -> Support {
    let attach_type = sys::BPF_TRACE_KPROBE_MULTI;
    let program = match load_return_zero(sys::BPF_PROG_TYPE_KPROBE, attach_type, 0) {
        Ok(program) => program,
        Err(errno) => return support_after(errno),
    };
    let mut symbol = c"utrace_no_such_function".as_ptr();
    let mut opts = sys::bpf_link_create_opts {
        sz: size_of::<sys::bpf_link_create_opts>() as _,
        ..Default::default()
    };
    opts.__bindgen_anon_1.kprobe_multi = sys::bpf_link_create_opts__bindgen_ty_1__bindgen_ty_2 {
        syms: &mut symbol,
        cnt: 1,
        ..Default::default()
    };
    match link(&program, attach_type, &opts) {
        Err(libc::ESRCH | libc::ENOENT) => Support::Yes,
        Err(errno) => support_after(errno),
        Ok(()) => Support::No,
    }
}

/// Whether a program can be attached at the entry of the kernel function of BTF id `function`.
fn fentry_link(function: u32) -> Support {
    let attached = load_return_zero(sys::BPF_PROG_TYPE_TRACING, sys::BPF_TRACE_FENTRY, function)
        .and_then(|program| link(&program, sys::BPF_TRACE_FENTRY, std::ptr::null()));
    match attached {
        Ok(()) => Support::Yes,
        Err(errno) => support_after(errno),
    }
}

/// Loads a program of `program_type` that only returns 0, for `attach_type` (at the kernel
/// function of BTF id `attach_btf_id`, or 0): its descriptor, or the errno.
fn load_return_zero(
    program_type: sys::bpf_prog_type,
    attach_type: sys::bpf_attach_type,
    attach_btf_id: u32,
) -> Result<OwnedFd, i32> {
    let mut return_zero = [sys::bpf_insn::default(); 2];
    return_zero[0].code = (sys::BPF_ALU64 | sys::BPF_MOV | sys::BPF_K) as u8;
    return_zero[1].code = (sys::BPF_JMP | sys::BPF_EXIT) as u8;
    let mut opts = sys::bpf_prog_load_opts {
        sz: size_of::<sys::bpf_prog_load_opts>() as _,
        expected_attach_type: attach_type,
        attach_btf_id,
        ..Default::default()
    };
    // SAFETY: the instructions, the license and the options live through the call, and the
    // options' size is their own; libbpf returns a new descriptor or -errno.
    let program = unsafe {
        sys::bpf_prog_load(
            program_type,
            std::ptr::null(),
            c"GPL".as_ptr(),
            return_zero.as_ptr(),
            return_zero.len() as _,
            &mut opts,
        )
    };
    if program < 0 {
        return Err(-program);
    }
    // SAFETY: a descriptor libbpf just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(program) })
}

/// Links `program` as `attach_type` with `opts` (or none), and releases the link at once: the
/// errno if the kernel refused.
fn link(
    program: &OwnedFd,
    attach_type: sys::bpf_attach_type,
    opts: *const sys::bpf_link_create_opts,
) -> Result<(), i32> {
    // SAFETY: the program is open, and the options (if any) and what they point at live through
    // the call; libbpf returns a new descriptor or -errno. Target 0: no program to attach to,
    // which fentry asks for (it would take a descriptor for a BPF program to trace).
    let link = unsafe { sys::bpf_link_create(program.as_raw_fd(), 0, attach_type, opts) };
    if link < 0 {
        return Err(-link);
    }
    // SAFETY: a descriptor libbpf just opened, owned by nobody else.
    drop(unsafe { OwnedFd::from_raw_fd(link) });
    Ok(())
}
