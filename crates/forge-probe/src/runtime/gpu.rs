//! A thin layer over the CUDA driver API (cudarc `sys`, loaded at run time):
//! presence checks, device discovery, contexts, memory, NVRTC compilation,
//! launches, events and IPC handles. Owns every `unsafe` call of the runtime
//! probe; must not decide verdicts or print.
use std::ffi::{c_void, CStr, CString};
use std::mem::MaybeUninit;

use anyhow::{anyhow, Context, Result};
use cudarc::driver::sys::{self, CUdevice_P2PAttribute as P2pAttr, CUdevice_attribute as Attr};
use serde::{Deserialize, Serialize};

use forge_os::error::Failure;

/// The kernels, compiled at run time for each device's own arch.
pub const KERNELS: &str = include_str!("dispatch.cu");

/// Call a driver function; an error names the call.
macro_rules! cu {
    ($f:ident($($a:expr),* $(,)?)) => {
        unsafe { sys::$f($($a),*) }.result().map_err(|e| anyhow!("{} failed: {e}", stringify!($f)))
    };
}

/// Exit 3 (missing environment) instead of cudarc's panic when libcuda or
/// libnvrtc cannot be loaded.
pub fn require_libraries() -> Result<()> {
    if !unsafe { sys::is_culib_present() } {
        return Err(Failure::env("no CUDA driver: libcuda.so could not be loaded on this machine")
            .hint("run `probe --run` on a machine with an NVIDIA GPU and its driver (nvidia-smi must work); `probe` without --run needs no GPU")
            .into());
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Failure::env("no NVRTC: libnvrtc.so could not be loaded (needed to compile the probe kernels)")
            .hint("install the CUDA toolkit or the nvidia-cuda-nvrtc wheel and put its lib folder on LD_LIBRARY_PATH")
            .into());
    }
    require_symbols()?;
    cu!(cuInit(0))
}

/// Every driver entry point the probe calls. cudarc resolves a symbol on first
/// use and panics when the driver lacks it, so all are looked up first.
const SYMBOLS: &[&str] = &[
    "cuCtxEnablePeerAccess",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDeviceGetCount",
    "cuDeviceGetName",
    "cuDeviceGetP2PAttribute",
    "cuDeviceGetPCIBusId",
    "cuDevicePrimaryCtxRetain",
    "cuDeviceTotalMem_v2",
    "cuDriverGetVersion",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuInit",
    "cuIpcGetMemHandle",
    "cuIpcOpenMemHandle_v2",
    "cuLaunchKernel",
    "cuMemAlloc_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyPeerAsync",
    "cuMemsetD8_v2",
    "cuModuleGetFunction",
    "cuModuleLoadData",
    "cuStreamCreate",
    "cuStreamWaitEvent",
];

/// Drivers before CUDA 12.8 lack `cuEventElapsedTime_v2`; the older entry
/// point is used there (set once by [`require_symbols`]).
static ELAPSED_V2: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

fn has_symbol(name: &str) -> bool {
    // SAFETY: looking a symbol up loads nothing new and calls nothing.
    unsafe { sys::culib().get::<unsafe extern "C" fn()>(name.as_bytes()).is_ok() }
}

/// Exit 3 naming the first missing entry point, instead of cudarc's panic.
fn require_symbols() -> Result<()> {
    let v2 = has_symbol("cuEventElapsedTime_v2");
    ELAPSED_V2.store(v2, std::sync::atomic::Ordering::Relaxed);
    let missing = SYMBOLS.iter().copied().chain((!v2).then_some("cuEventElapsedTime")).find(|s| !has_symbol(s));
    if let Some(m) = missing {
        return Err(Failure::env(format!(
            "the CUDA driver on this machine lacks {m}: it is too old for `probe --run`"
        ))
        .hint("update the NVIDIA driver (CUDA 12 or newer)")
        .into());
    }
    Ok(())
}

/// One device as the driver reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub ordinal: i32,
    pub name: String,
    /// Compute capability as an SM number (90 for 9.0).
    pub sm: u32,
    pub memory_bytes: usize,
    pub multiprocessors: i32,
    pub pci_bus_id: String,
    /// CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: fabric handles (MNNVL) usable.
    pub fabric_handles: bool,
    /// Active NVLink links (NVML), when libnvidia-ml.so.1 could be loaded.
    pub nvlinks: Option<u32>,
}

/// P2P attributes between an ordered pair of devices.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct P2p {
    pub from: i32,
    pub to: i32,
    pub access: bool,
    pub native_atomics: bool,
    pub performance_rank: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Discovery {
    /// Driver API version as `major.minor` (13.0).
    pub driver: String,
    pub devices: Vec<DeviceInfo>,
    /// Every ordered pair of distinct devices.
    pub p2p: Vec<P2p>,
}

impl Discovery {
    pub fn peer_access(&self, a: i32, b: i32) -> bool {
        a == b || self.p2p.iter().any(|p| p.from == a && p.to == b && p.access)
    }
}

fn attr(dev: sys::CUdevice, a: Attr) -> Result<i32> {
    let mut v = 0;
    cu!(cuDeviceGetAttribute(&mut v, a, dev))?;
    Ok(v)
}

pub fn device(ordinal: i32) -> Result<sys::CUdevice> {
    let mut d = MaybeUninit::uninit();
    cu!(cuDeviceGet(d.as_mut_ptr(), ordinal))?;
    Ok(unsafe { d.assume_init() })
}

pub fn device_count() -> Result<i32> {
    let mut n = 0;
    cu!(cuDeviceGetCount(&mut n))?;
    Ok(n)
}

/// Devices, the P2P matrix and fabric-handle support of this process's
/// visible devices (CUDA_VISIBLE_DEVICES applies).
pub fn discover() -> Result<Discovery> {
    let mut version = 0;
    cu!(cuDriverGetVersion(&mut version))?;
    let n = device_count()?;
    let nvml = crate::runtime::nvml::Nvml::open();
    let mut devices = Vec::new();
    for ordinal in 0..n {
        let dev = device(ordinal)?;
        let mut name = [0 as std::ffi::c_char; 256];
        cu!(cuDeviceGetName(name.as_mut_ptr(), 256, dev))?;
        let mut bus = [0 as std::ffi::c_char; 64];
        cu!(cuDeviceGetPCIBusId(bus.as_mut_ptr(), 64, dev))?;
        let mut mem = 0usize;
        cu!(cuDeviceTotalMem_v2(&mut mem, dev))?;
        let pci_bus_id = unsafe { CStr::from_ptr(bus.as_ptr()) }.to_string_lossy().into_owned();
        devices.push(DeviceInfo {
            ordinal,
            name: unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned(),
            sm: (attr(dev, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? * 10
                + attr(dev, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?) as u32,
            memory_bytes: mem,
            multiprocessors: attr(dev, Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            fabric_handles: attr(dev, Attr::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED)? != 0,
            nvlinks: nvml.as_ref().and_then(|n| n.active_links(&pci_bus_id)),
            pci_bus_id,
        });
    }
    let mut p2p = Vec::new();
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            let (da, db) = (device(a)?, device(b)?);
            let get = |at: P2pAttr| -> Result<i32> {
                let mut v = 0;
                cu!(cuDeviceGetP2PAttribute(&mut v, at, da, db))?;
                Ok(v)
            };
            p2p.push(P2p {
                from: a,
                to: b,
                access: get(P2pAttr::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED)? != 0,
                native_atomics: get(P2pAttr::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED)? != 0,
                performance_rank: get(P2pAttr::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK)?,
            });
        }
    }
    Ok(Discovery { driver: format!("{}.{}", version / 1000, version % 1000 / 10), devices, p2p })
}

/// A stream of one device (opaque: only this module touches the handle).
#[derive(Debug, Clone, Copy)]
pub struct Stream(sys::CUstream);
/// A recorded point on a stream, for timing and cross-stream waits.
#[derive(Debug, Clone, Copy)]
pub struct Event(sys::CUevent);
/// A device's primary context.
#[derive(Debug, Clone, Copy)]
pub struct Ctx(sys::CUcontext);

/// A device with its primary context and a stream.
pub struct Gpu {
    pub ordinal: i32,
    pub sm: u32,
    pub multiprocessors: i32,
    pub ctx: Ctx,
    pub stream: Stream,
    module: sys::CUmodule,
}

impl Gpu {
    /// Retain the primary context and load the kernels compiled for this arch.
    pub fn open(ordinal: i32, cubin: &[u8]) -> Result<Gpu> {
        let dev = device(ordinal)?;
        let mut ctx = MaybeUninit::uninit();
        cu!(cuDevicePrimaryCtxRetain(ctx.as_mut_ptr(), dev))?;
        let ctx = unsafe { ctx.assume_init() };
        cu!(cuCtxSetCurrent(ctx))?;
        let mut stream = MaybeUninit::uninit();
        cu!(cuStreamCreate(stream.as_mut_ptr(), sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32))?;
        let mut module = MaybeUninit::uninit();
        cu!(cuModuleLoadData(module.as_mut_ptr(), cubin.as_ptr() as *const c_void))?;
        let sm = (attr(dev, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? * 10
            + attr(dev, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?) as u32;
        let multiprocessors = attr(dev, Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        Ok(Gpu {
            ordinal,
            sm,
            multiprocessors,
            ctx: Ctx(ctx),
            stream: Stream(unsafe { stream.assume_init() }),
            module: unsafe { module.assume_init() },
        })
    }

    /// Make this device's context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        cu!(cuCtxSetCurrent(self.ctx.0))
    }

    /// Let this context write to `peer`'s memory (already enabled is fine).
    pub fn enable_peer(&self, peer: &Gpu) -> Result<()> {
        self.bind()?;
        match unsafe { sys::cuCtxEnablePeerAccess(peer.ctx.0, 0) } {
            sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
            e => Err(anyhow!("cuCtxEnablePeerAccess(GPU {} -> GPU {}) failed: {:?}", self.ordinal, peer.ordinal, e)),
        }
    }

    pub fn alloc(&self, bytes: usize) -> Result<u64> {
        self.bind()?;
        let mut p = 0;
        cu!(cuMemAlloc_v2(&mut p, bytes.max(1)))
            .with_context(|| format!("allocating {} MiB on GPU {}", bytes >> 20, self.ordinal))?;
        cu!(cuMemsetD8_v2(p, 0, bytes.max(1)))?;
        Ok(p)
    }

    pub fn upload<T: Copy>(&self, dst: u64, src: &[T]) -> Result<()> {
        self.bind()?;
        cu!(cuMemcpyHtoD_v2(dst, src.as_ptr() as *const c_void, std::mem::size_of_val(src)))
    }

    pub fn download<T: Copy + Default>(&self, src: u64, n: usize) -> Result<Vec<T>> {
        self.bind()?;
        self.sync()?;
        let mut v = vec![T::default(); n];
        cu!(cuMemcpyDtoH_v2(v.as_mut_ptr() as *mut c_void, src, std::mem::size_of_val(&v[..])))?;
        Ok(v)
    }

    /// Launch kernel `name` on this device's stream.
    pub fn launch(&self, name: &str, grid: u32, block: u32, args: &[Arg]) -> Result<()> {
        self.bind()?;
        let cname = CString::new(name).expect("kernel name");
        let mut f = MaybeUninit::uninit();
        cu!(cuModuleGetFunction(f.as_mut_ptr(), self.module, cname.as_ptr()))?;
        let mut store: Vec<u64> = args.iter().map(|a| a.bits()).collect();
        let mut ptrs: Vec<*mut c_void> = store.iter_mut().map(|v| v as *mut u64 as *mut c_void).collect();
        cu!(cuLaunchKernel(
            f.assume_init(),
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            self.stream.0,
            ptrs.as_mut_ptr(),
            std::ptr::null_mut()
        ))
        .with_context(|| format!("launching `{name}` on GPU {}", self.ordinal))
    }

    pub fn new_stream(&self) -> Result<Stream> {
        self.bind()?;
        let mut s = MaybeUninit::uninit();
        cu!(cuStreamCreate(s.as_mut_ptr(), sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32))?;
        Ok(Stream(unsafe { s.assume_init() }))
    }

    pub fn sync(&self) -> Result<()> {
        self.bind()?;
        cu!(cuCtxSynchronize()).with_context(|| format!("GPU {}", self.ordinal))
    }

    /// Make `stream` wait for `event` (recorded on another stream).
    pub fn wait(&self, stream: Stream, event: Event) -> Result<()> {
        self.bind()?;
        cu!(cuStreamWaitEvent(stream.0, event.0, 0))
    }

    pub fn event(&self) -> Result<Event> {
        self.bind()?;
        let mut e = MaybeUninit::uninit();
        cu!(cuEventCreate(e.as_mut_ptr(), 0))?;
        Ok(Event(unsafe { e.assume_init() }))
    }

    pub fn record(&self, e: Event, stream: Stream) -> Result<()> {
        self.bind()?;
        cu!(cuEventRecord(e.0, stream.0))
    }

    /// Copy-engine copy into memory another context owns (or an IPC mapping).
    pub fn copy_peer(&self, stream: Stream, dst: u64, dst_ctx: Option<Ctx>, src: u64, bytes: usize) -> Result<()> {
        self.bind()?;
        match dst_ctx {
            Some(c) => cu!(cuMemcpyPeerAsync(dst, c.0, src, self.ctx.0, bytes, stream.0)),
            None => cu!(cuMemcpyDtoDAsync_v2(dst, src, bytes, stream.0)),
        }
    }

    /// An IPC handle other processes can open.
    pub fn ipc_handle(&self, ptr: u64) -> Result<[u8; 64]> {
        self.bind()?;
        let mut h = MaybeUninit::<sys::CUipcMemHandle>::uninit();
        cu!(cuIpcGetMemHandle(h.as_mut_ptr(), ptr))?;
        let h = unsafe { h.assume_init() };
        Ok(h.reserved.map(|c| c as u8))
    }

    /// Map another process's allocation into this context.
    pub fn ipc_open(&self, handle: &[u8]) -> Result<u64> {
        self.bind()?;
        let mut h = sys::CUipcMemHandle { reserved: [0; 64] };
        for (d, s) in h.reserved.iter_mut().zip(handle) {
            *d = *s as std::ffi::c_char;
        }
        let mut p = 0;
        cu!(cuIpcOpenMemHandle_v2(&mut p, h, sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32))?;
        Ok(p)
    }
}

/// Milliseconds between two recorded events (waits for the second).
pub fn elapsed_ms(start: Event, end: Event) -> Result<f64> {
    cu!(cuEventSynchronize(end.0))?;
    let mut ms = 0f32;
    if ELAPSED_V2.load(std::sync::atomic::Ordering::Relaxed) {
        cu!(cuEventElapsedTime_v2(&mut ms, start.0, end.0))?;
    } else {
        type Elapsed = unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> sys::CUresult;
        // SAFETY: the pre-12.8 entry point has this signature; presence was checked.
        let f = unsafe { sys::culib().get::<Elapsed>(b"cuEventElapsedTime") }
            .map_err(|e| anyhow!("cuEventElapsedTime: {e}"))?;
        unsafe { f(&mut ms, start.0, end.0) }.result().map_err(|e| anyhow!("cuEventElapsedTime failed: {e}"))?;
    }
    Ok(ms as f64)
}

/// A kernel argument: a 32-bit int or a device pointer.
#[derive(Debug, Clone, Copy)]
pub enum Arg {
    I(i32),
    P(u64),
}

impl Arg {
    fn bits(self) -> u64 {
        match self {
            // The driver reads 4 bytes from the start of the slot (little endian).
            Arg::I(v) => v as u32 as u64,
            Arg::P(p) => p,
        }
    }
}

/// Compile the kernels with NVRTC to a cubin for `sm` (e.g. 90 -> sm_90).
pub fn compile(sm: u32) -> Result<Vec<u8>> {
    use cudarc::nvrtc::{result, sys as nv};
    let src = CString::new(KERNELS).expect("kernel source has no NUL");
    let name = CString::new("dispatch.cu").expect("name");
    let prog = result::create_program(&src, Some(&name)).map_err(|e| anyhow!("nvrtcCreateProgram: {e}"))?;
    let opts = [format!("--gpu-architecture=sm_{sm}"), "--std=c++17".into()];
    let compiled = unsafe { result::compile_program(prog, &opts) };
    let out = match compiled {
        Ok(()) => {
            let mut size = 0usize;
            unsafe { nv::nvrtcGetCUBINSize(prog, &mut size) }
                .result()
                .map_err(|e| anyhow!("nvrtcGetCUBINSize: {e}"))?;
            let mut cubin = vec![0u8; size];
            unsafe { nv::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut std::ffi::c_char) }
                .result()
                .map_err(|e| anyhow!("nvrtcGetCUBIN: {e}"))?;
            Ok(cubin)
        }
        Err(e) => {
            let log = unsafe { result::get_program_log(prog) }.unwrap_or_default();
            let log: String = log.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect();
            Err(anyhow!("NVRTC could not compile runtime/dispatch.cu for sm_{sm}: {e}\n{log}"))
        }
    };
    unsafe { result::destroy_program(prog) }.ok();
    out
}
