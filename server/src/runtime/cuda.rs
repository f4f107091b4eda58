//! The CUDA driver API as `server gpu-probe` reaches it: found as every CUDA program finds it
//! (`dlopen`, then `dlsym`), which is where HAMi-core hooks in, with a context made current on
//! card 0. Only the probes use it; the server itself never loads the driver.

use std::ffi::{CStr, c_void};

/// The driver, opened, with a context on card 0 current on this thread.
pub struct Driver {
    library: *mut c_void,
}

/// A driver call's answer as a result: `what` failed with the driver's code.
pub fn check(what: &str, code: i32) -> Result<(), String> {
    match code {
        0 => Ok(()),
        code => Err(format!("{what} failed (CUDA error {code})")),
    }
}

impl Driver {
    /// Opens `libcuda.so.1` and makes a context on card 0 current.
    pub fn on_card_0() -> Result<Driver, String> {
        type Init = unsafe extern "C" fn(u32) -> i32;
        type DeviceGet = unsafe extern "C" fn(*mut i32, i32) -> i32;
        type CtxCreate = unsafe extern "C" fn(*mut *mut c_void, u32, i32) -> i32;
        // SAFETY: dlopen with a NUL-terminated name; each symbol is called with the signature the
        // CUDA driver API documents for it and pointers to live locals.
        unsafe {
            let library = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW);
            if library.is_null() {
                return Err("libcuda.so.1 is not installed".into());
            }
            let driver = Driver { library };
            let init: Init = driver.symbol(c"cuInit")?;
            let device_get: DeviceGet = driver.symbol(c"cuDeviceGet")?;
            let ctx_create: CtxCreate = driver.symbol(c"cuCtxCreate_v2")?;
            check("cuInit", init(0))?;
            let mut device = 0;
            check("cuDeviceGet", device_get(&mut device, 0))?;
            let mut context = std::ptr::null_mut();
            check("cuCtxCreate", ctx_create(&mut context, 0, device))?;
            Ok(driver)
        }
    }

    /// The driver's function `name`, as `F`.
    ///
    /// # Safety
    /// `F` must be a function pointer type of the signature the driver API documents for `name`.
    pub unsafe fn symbol<F: Copy>(&self, name: &CStr) -> Result<F, String> {
        assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
        // SAFETY: dlsym with a NUL-terminated name on an open library; the caller vouches for F.
        unsafe {
            let f = libc::dlsym(self.library, name.as_ptr());
            if f.is_null() {
                return Err(format!("libcuda has no {}", name.to_string_lossy()));
            }
            Ok(std::mem::transmute_copy(&f))
        }
    }
}
