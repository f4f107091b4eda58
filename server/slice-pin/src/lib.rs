//! `libslice_pin.so`, preloaded before HAMi-core in a GPU session's sandbox (the sandbox's own
//! `/etc/ld.so.preload` names it first). HAMi-core takes a slice's limits from the environment
//! (`CUDA_DEVICE_MEMORY_LIMIT_0`, `CUDA_DEVICE_SM_LIMIT`, where its accounting file is), which any
//! program may unset or change for itself. This library's `getenv` comes first in every program's
//! symbol lookup, HAMi-core's included: for a setting the sandbox's read-only `/etc/gpu-slice.env`
//! names it answers that file's value (or nothing, for a `!NAME` line: a switch such as
//! `CUDA_DISABLE_CONTROL` then reads as unset whatever a program sets); for anything else it
//! reads the environment as libc does.
//! It neither allocates nor locks after its first answer, and calls nothing that reads the
//! environment (no `dlsym`, which HAMi-core itself replaces).
//!
//! Why our own: no library does this; ~100 lines with no dependency, loaded into every program of
//! a GPU session, so it must be small and must never panic (an `extern "C"` panic aborts).

use std::ffi::{CStr, CString, c_char};
use std::sync::OnceLock;

/// The sandbox's pinned settings, one `NAME=value` a line.
pub const PINNED_FILE: &str = "/etc/gpu-slice.env";

/// Only names with these prefixes are looked up in the file; everything else goes straight to
/// the environment.
const PINNED_PREFIXES: [&[u8]; 2] = [b"CUDA_", b"GPU_CORE_"];

/// A pinned name and its value; `None`: pinned unset.
type Pinned = (CString, Option<CString>);

/// `NAME=value` and `!NAME` lines; blank lines, other lines and names with NUL are skipped.
pub fn parse(text: &str) -> Vec<Pinned> {
    text.lines()
        .filter_map(|line| match line.strip_prefix('!') {
            Some(name) => Some((name.trim(), None)),
            None => line
                .split_once('=')
                .map(|(name, value)| (name, Some(value.trim_end_matches('\r')))),
        })
        .filter(|(name, _)| !name.trim().is_empty())
        .filter_map(|(name, value)| {
            Some((
                CString::new(name.trim()).ok()?,
                match value {
                    Some(value) => Some(CString::new(value).ok()?),
                    None => None,
                },
            ))
        })
        .collect()
}

fn pinned() -> &'static [Pinned] {
    static PINNED: OnceLock<Vec<Pinned>> = OnceLock::new();
    PINNED.get_or_init(|| {
        std::fs::read_to_string(PINNED_FILE)
            .map(|text| parse(&text))
            .unwrap_or_default()
    })
}

/// `name`'s pinned value in `table`, for a name this library pins: `Some(None)` when it is
/// pinned unset.
pub fn pinned_value<'t>(table: &'t [Pinned], name: &[u8]) -> Option<Option<&'t CStr>> {
    if !PINNED_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return None;
    }
    table
        .iter()
        .find(|(key, _)| key.as_bytes() == name)
        .map(|(_, value)| value.as_deref())
}

unsafe extern "C" {
    static environ: *const *const c_char;
}

/// The environment's value of `name`, as libc's `getenv` finds it.
///
/// # Safety
/// `environ` must be the process's environment (NUL-terminated `NAME=value` strings).
unsafe fn from_environ(name: &[u8]) -> *mut c_char {
    // SAFETY: environ is libc's list of the process's variables, ended by a null pointer.
    let mut entry = unsafe { environ };
    if entry.is_null() {
        return std::ptr::null_mut();
    }
    loop {
        // SAFETY: entry points into that list, which is null-terminated.
        let item = unsafe { *entry };
        if item.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: each item is a NUL-terminated string.
        let bytes = unsafe { CStr::from_ptr(item) }.to_bytes();
        if bytes.len() > name.len() && bytes.starts_with(name) && bytes[name.len()] == b'=' {
            // SAFETY: the value starts after the '=' inside the same string.
            return unsafe { item.add(name.len() + 1) } as *mut c_char;
        }
        // SAFETY: the list goes on until its null pointer, not yet reached.
        entry = unsafe { entry.add(1) };
    }
}

/// libc's `getenv`, with the sandbox's pinned settings first.
///
/// # Safety
/// `name` is null or a NUL-terminated string, as for libc's `getenv`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn getenv(name: *const c_char) -> *mut c_char {
    if name.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let wanted = unsafe { CStr::from_ptr(name) }.to_bytes();
    if wanted.is_empty() || wanted.contains(&b'=') {
        return std::ptr::null_mut();
    }
    if PINNED_PREFIXES.iter().any(|p| wanted.starts_with(p))
        && let Some(value) = pinned_value(pinned(), wanted)
    {
        return value.map_or(std::ptr::null_mut(), |v| v.as_ptr() as *mut c_char);
    }
    // SAFETY: environ is this process's environment.
    unsafe { from_environ(wanted) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_pins_only_the_settings_it_names_and_only_hamis_names() {
        let table = parse(
            "CUDA_DEVICE_MEMORY_LIMIT_0=8192m\nCUDA_DEVICE_MEMORY_LIMIT=\n\nnot a line\nPATH=/evil\n\
             !CUDA_DISABLE_CONTROL\n!\n",
        );
        // Pinned unset: HAMi-core's switch-off reads as absent, whatever a program sets.
        assert_eq!(pinned_value(&table, b"CUDA_DISABLE_CONTROL"), Some(None));
        assert_eq!(
            pinned_value(&table, b"CUDA_DEVICE_MEMORY_LIMIT_0"),
            Some(Some(c"8192m"))
        );
        // Pinned empty: HAMi-core reads "no fallback limit", whatever a program sets.
        assert_eq!(
            pinned_value(&table, b"CUDA_DEVICE_MEMORY_LIMIT"),
            Some(Some(c""))
        );
        assert_eq!(pinned_value(&table, b"CUDA_DEVICE_SM_LIMIT"), None);
        // A name outside HAMi-core's is never taken from the file.
        assert_eq!(pinned_value(&table, b"PATH"), None);
    }

    #[test]
    fn other_names_read_the_environment_as_libc_does() {
        // SAFETY: set before any thread of this test reads it; the names are this test's own.
        unsafe {
            std::env::set_var("SLICE_PIN_TEST", "a=b");
            std::env::set_var("SLICE_PIN_TEST_LONGER", "x");
        }
        // SAFETY: NUL-terminated names.
        let value = unsafe { getenv(c"SLICE_PIN_TEST".as_ptr()) };
        assert!(!value.is_null());
        // SAFETY: a value from the environment is NUL-terminated.
        assert_eq!(unsafe { CStr::from_ptr(value) }, c"a=b");
        // SAFETY: as above.
        unsafe {
            assert!(getenv(c"SLICE_PIN".as_ptr()).is_null());
            assert!(getenv(c"SLICE_PIN_TEST=".as_ptr()).is_null());
            assert!(getenv(std::ptr::null()).is_null());
        }
    }
}
