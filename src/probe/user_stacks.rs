//! The stacks the entry probes and kernel events unwound (`--stack`, src/bpf/stacks.bpf.h), read
//! from their maps once the recording ends: the maps never evict a stack, so every id an event
//! carries is still there.

use libbpf_rs::{MapCore, MapFlags};

use super::interface::skel::types;
use super::LoadedProbes;

// SAFETY: both are plain integers without padding (stacks.bpf.h lays them out so), any bytes a
// valid value.
unsafe impl plain::Plain for types::stack_key {}
unsafe impl plain::Plain for types::stack {}

/// One frame as the kernel stored it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawFrame {
    /// In the file with this build id, at this file offset.
    InFile { build_id: Vec<u8>, offset: u64 },
    /// At this address: the kernel could not place it in a file.
    Address(u64),
}

/// One distinct stack as the probes stored it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawStack {
    /// The id the entries carry.
    pub id: u32,
    /// The user frames, innermost first: where the probe hit, then the frame pointer chain.
    pub user: Vec<RawFrame>,
    /// The kernel frames' addresses, innermost first (kernel events only).
    pub kernel: Vec<u64>,
    /// The caller's return address, read from the top of the stack.
    pub caller: Option<RawCaller>,
    /// Taken by a kernel event's program (a system call's entry), not at a function's entry.
    pub kernel_event: bool,
}

/// Where the return address at the top of the stack lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawCaller {
    /// The file's device, as `stat` gives it.
    pub device: u64,
    pub inode: u64,
    /// In the file.
    pub offset: u64,
}

/// `struct bpf_stack_build_id`: status (i32), build id (20 bytes), then the offset or address.
const FRAME_SIZE: usize = 32;
const BUILD_ID_SIZE: usize = 20;
/// `enum bpf_stack_build_id_status`.
const STATUS_VALID: i32 = 1;
const STATUS_IP: i32 = 2;

impl LoadedProbes<'_> {
    /// Every distinct stack, by id.
    pub fn user_stacks(&self) -> Vec<RawStack> {
        let maps = &self.skel.maps;
        let frames = |map: &dyn MapCore, id: i32| -> Option<Vec<u8>> {
            let id = u32::try_from(id).ok()?;
            map.lookup(&id.to_ne_bytes(), MapFlags::ANY).ok().flatten()
        };
        let mut stacks: Vec<RawStack> = maps
            .stacks
            .keys()
            .filter_map(|key| {
                let value = maps.stacks.lookup(&key, MapFlags::ANY).ok().flatten()?;
                let mut stack_key = types::stack_key::default();
                let mut stack = types::stack::default();
                plain::copy_from_bytes(&mut stack_key, &key).ok()?;
                plain::copy_from_bytes(&mut stack, &value).ok()?;
                Some(RawStack {
                    id: stack.id,
                    user: frames(&maps.user_stacks, stack_key.user_stack)
                        .map(|value| parse_frames(&value))
                        .unwrap_or_default(),
                    kernel: frames(&maps.kernel_stacks, stack_key.kernel_stack)
                        .map(|value| parse_addresses(&value))
                        .unwrap_or_default(),
                    caller: (stack.inode != 0).then(|| RawCaller {
                        device: kernel_device_to_user(stack.device),
                        inode: stack.inode,
                        offset: stack.offset,
                    }),
                    kernel_event: stack_key.kernel_event != 0,
                })
            })
            .collect();
        stacks.sort_by_key(|stack| stack.id);
        stacks
    }
}

/// A device number as the kernel keeps it (`major << 20 | minor`) as `stat` gives it.
pub(super) fn kernel_device_to_user(device: u32) -> u64 {
    libc::makedev(device >> 20, device & 0xf_ffff)
}

/// The addresses of a kernel stack map value; they end at the first zero.
fn parse_addresses(value: &[u8]) -> Vec<u64> {
    value
        .chunks_exact(8)
        .map(|word| u64::from_ne_bytes(word.try_into().expect("8 bytes")))
        .take_while(|&address| address != 0)
        .collect()
}

/// The frames of a stack map value; they end at the first empty one.
fn parse_frames(value: &[u8]) -> Vec<RawFrame> {
    value
        .chunks_exact(FRAME_SIZE)
        .map_while(|frame| {
            let status = i32::from_ne_bytes(frame[..4].try_into().expect("4 bytes"));
            let word = u64::from_ne_bytes(frame[24..].try_into().expect("8 bytes"));
            match status {
                STATUS_VALID => Some(RawFrame::InFile {
                    build_id: frame[4..4 + BUILD_ID_SIZE].to_vec(),
                    offset: word,
                }),
                STATUS_IP => Some(RawFrame::Address(word)),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_stacks_end_at_the_first_zero_and_devices_read_as_stat_gives_them() {
        let words: Vec<u8> = [0xffff_ffff_8100_0010u64, 0xffff_ffff_8100_0020, 0, 7]
            .iter()
            .flat_map(|word| word.to_ne_bytes())
            .collect();
        assert_eq!(
            parse_addresses(&words),
            [0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020]
        );
        // 254:0 (a device-mapper volume) and 8:17 (sdb1).
        assert_eq!(kernel_device_to_user(254 << 20), libc::makedev(254, 0));
        assert_eq!(kernel_device_to_user((8 << 20) | 17), libc::makedev(8, 17));
    }

    #[test]
    fn frames_end_at_the_first_empty_one() {
        let frame = |status: i32, id: u8, word: u64| {
            let mut bytes = status.to_ne_bytes().to_vec();
            bytes.extend([id; BUILD_ID_SIZE]);
            bytes.extend(word.to_ne_bytes());
            bytes
        };
        let mut value = frame(STATUS_VALID, 7, 0x1234);
        value.extend(frame(STATUS_IP, 0, 0x7fff_0000));
        value.extend(frame(0, 0, 0));
        value.extend(frame(STATUS_VALID, 9, 1));
        assert_eq!(
            parse_frames(&value),
            [
                RawFrame::InFile {
                    build_id: vec![7; BUILD_ID_SIZE],
                    offset: 0x1234
                },
                RawFrame::Address(0x7fff_0000),
            ]
        );
    }
}
