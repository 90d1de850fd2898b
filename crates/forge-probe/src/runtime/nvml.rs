//! Optional NVML (libnvidia-ml.so.1, dlopened): active NVLink links per GPU.
//! Absent library or any NVML error means "unknown", never a failure.
use std::ffi::{c_char, c_int, c_uint, c_void, CString};

type Init = unsafe extern "C" fn() -> c_int;
type ByBus = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;
type LinkState = unsafe extern "C" fn(*mut c_void, c_uint, *mut c_int) -> c_int;

/// NVML_NVLINK_MAX_LINKS in nvml.h (18 on Hopper).
const MAX_LINKS: u32 = 18;

pub struct Nvml {
    by_bus: ByBus,
    link_state: LinkState,
}

impl Nvml {
    /// Load and initialise NVML; None when it is not there.
    pub fn open() -> Option<Nvml> {
        let lib = CString::new("libnvidia-ml.so.1").ok()?;
        // The handle is kept for the life of the process (never dlclosed).
        let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return None;
        }
        let sym = |name: &str| {
            let n = CString::new(name).ok()?;
            let p = unsafe { libc::dlsym(h, n.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        let init: Init = unsafe { std::mem::transmute(sym("nvmlInit_v2")?) };
        let by_bus: ByBus = unsafe { std::mem::transmute(sym("nvmlDeviceGetHandleByPciBusId_v2")?) };
        let link_state: LinkState = unsafe { std::mem::transmute(sym("nvmlDeviceGetNvLinkState")?) };
        (unsafe { init() } == 0).then_some(Nvml { by_bus, link_state })
    }

    /// Number of active NVLink links of the GPU at `pci_bus_id`.
    pub fn active_links(&self, pci_bus_id: &str) -> Option<u32> {
        let bus = CString::new(pci_bus_id).ok()?;
        let mut dev = std::ptr::null_mut();
        if unsafe { (self.by_bus)(bus.as_ptr(), &mut dev) } != 0 {
            return None;
        }
        let mut active = 0;
        for link in 0..MAX_LINKS {
            let mut state = 0;
            // Links past the device's count answer NVML_ERROR_INVALID_ARGUMENT / NOT_SUPPORTED.
            if unsafe { (self.link_state)(dev, link, &mut state) } == 0 && state != 0 {
                active += 1;
            }
        }
        Some(active)
    }
}
