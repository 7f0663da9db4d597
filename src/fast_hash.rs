//! A hash map for the hot paths of decoding and replaying, keyed by thread ids and call paths.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A hash map keyed by small integers or slices of them (thread ids, call paths).
pub type FastHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A multiply-and-rotate hasher for thread ids and call paths: SipHash would cost more than
/// the rest of replaying an event. Keys are not chosen by an adversary, so flooding resistance
/// is not needed.
#[derive(Default)]
pub struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        // The multiplication leaves the low bits (the bucket index) poorly mixed: fold the high
        // bits into them, keeping the high bits the table also uses.
        self.0 ^ (self.0 >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        // A slice of integers arrives here as one run of bytes: take it eight at a time.
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.add(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_hasher_tells_paths_apart() {
        use std::hash::BuildHasher;
        let hasher = BuildHasherDefault::<FastHasher>::default();
        let paths: [&[u32]; 6] = [&[], &[0], &[0, 0], &[1, 2], &[2, 1], &[1, 2, 3]];
        let hashes: std::collections::HashSet<u64> =
            paths.iter().map(|path| hasher.hash_one(path)).collect();
        assert_eq!(hashes.len(), paths.len());
    }
}
