//! `-u USER`: the ids the traced command runs with, looked up before it is forked.

use std::ffi::{CStr, CString};

/// Errors of looking a user up.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    #[error("-u {0}: no such user")]
    NoSuchUser(String),
    #[error("-u {0}: the name contains a NUL byte")]
    NulByte(String),
}

/// A user's uid, primary gid and supplementary groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserIds {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub groups: Vec<libc::gid_t>,
}

impl UserIds {
    /// Looks up a user by name, or by number when the name is all digits and no user has it.
    pub fn lookup(user: &str) -> Result<UserIds, UserError> {
        let name = CString::new(user).map_err(|_| UserError::NulByte(user.to_string()))?;
        let mut buffer = vec![0 as libc::c_char; 16 * 1024];
        // SAFETY: a zeroed passwd is a valid out-parameter; getpwnam_r/getpwuid_r fill it with
        // pointers into `buffer`, which outlives every use below.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        unsafe {
            libc::getpwnam_r(
                name.as_ptr(),
                &raw mut entry,
                buffer.as_mut_ptr(),
                buffer.len(),
                &raw mut found,
            );
        }
        if found.is_null() {
            if let Ok(uid) = user.parse::<libc::uid_t>() {
                // SAFETY: as above.
                unsafe {
                    libc::getpwuid_r(
                        uid,
                        &raw mut entry,
                        buffer.as_mut_ptr(),
                        buffer.len(),
                        &raw mut found,
                    );
                }
            }
        }
        if found.is_null() {
            return Err(UserError::NoSuchUser(user.to_string()));
        }
        // SAFETY: getpw*_r succeeded, so pw_name points to a NUL-terminated string in `buffer`.
        let login = unsafe { CStr::from_ptr(entry.pw_name) }.to_owned();
        Ok(UserIds {
            uid: entry.pw_uid,
            gid: entry.pw_gid,
            groups: group_list(&login, entry.pw_gid),
        })
    }
}

/// The user's groups as `initgroups` would set them, primary group included.
fn group_list(login: &CStr, gid: libc::gid_t) -> Vec<libc::gid_t> {
    let mut count: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; count as usize];
        let capacity = count;
        // SAFETY: `groups` has room for `count` entries; getgrouplist writes at most that many
        // and sets `count` to the number it needs.
        let result =
            unsafe { libc::getgrouplist(login.as_ptr(), gid, groups.as_mut_ptr(), &raw mut count) };
        if result >= 0 {
            groups.truncate(count as usize);
            return groups;
        }
        if count <= capacity {
            // It failed without asking for more room: fall back to the primary group alone.
            return vec![gid];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_users_by_name_and_number() {
        let root = UserIds::lookup("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0));
        let nobody = UserIds::lookup("nobody").unwrap();
        assert_eq!(UserIds::lookup(&nobody.uid.to_string()).unwrap(), nobody);
        assert!(matches!(
            UserIds::lookup("no-such-user-utrace"),
            Err(UserError::NoSuchUser(_))
        ));
    }
}
