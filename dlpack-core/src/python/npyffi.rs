//! NumPy's C layout, as far as this crate reads it, and NumPy's C API found at run time.
//! (rust-numpy's `npyffi` module is the model: the C structs and the API capsule here,
//! the read policy above, in `import::numpy`.)
//!
//! - **The structs.** `PyArrayObject_fields` and `PyArray_Descr` of NumPy's
//!   `ndarraytypes.h`, up to the fields read, which are the same in NumPy 1.x and 2.x;
//!   the flags and type numbers read with them.
//! - **Found at run time.** NumPy's C API is its `_ARRAY_API` capsule, looked up in
//!   `sys.modules` (never imported: while NumPy is not loaded, no object is an array)
//!   and checked once: its table is NumPy's (it names the module's `ndarray` type), of
//!   the ABI of NumPy 1.x (from 1.25, whose `__dlpack__` exports what is read here) or
//!   2.x. Any other NumPy, an interpreter without NumPy, PyPy, GraalPy and
//!   free-threaded builds: `__dlpack__`, as for any producer.

use core::ffi::{c_char, c_int, c_long, c_longlong, c_short};
#[cfg(not(any(PyPy, GraalPy, Py_GIL_DISABLED)))]
use core::ffi::{c_uint, c_void};
use core::ptr::NonNull;
use std::sync::OnceLock;
#[cfg(not(any(PyPy, GraalPy, Py_GIL_DISABLED)))]
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::exceptions::PyException;
use pyo3::ffi;
#[cfg(not(any(PyPy, GraalPy, Py_GIL_DISABLED)))]
use pyo3::intern;
use pyo3::prelude::*;
#[cfg(not(any(PyPy, GraalPy, Py_GIL_DISABLED)))]
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict};

use crate::dtype::DataType;
use crate::ffi::DLDataTypeCode;

/// NumPy's array object up to the fields read here: `PyArrayObject_fields`, whose
/// first members are the same in NumPy 1.x and 2.x (ABI versions `0x01000009` and
/// `0x02000000`).
#[repr(C)]
pub(super) struct ArrayObject {
    ob_base: ffi::PyObject,
    pub(super) data: *mut c_char,
    pub(super) nd: c_int,
    pub(super) dimensions: *const isize,
    pub(super) strides: *const isize,
    pub(super) base: *mut ffi::PyObject,
    pub(super) descr: *const Descr,
    pub(super) flags: c_int,
}

/// NumPy's dtype object up to `type_num`: the prefix that `PyArray_Descr` keeps in
/// NumPy 1.x and 2.x (item size and alignment moved in 2.0, so they are not read: the
/// item size of the numeric types follows from the type number).
#[repr(C)]
pub(super) struct Descr {
    ob_base: ffi::PyObject,
    typeobj: *mut ffi::PyTypeObject,
    kind: c_char,
    type_: c_char,
    pub(super) byteorder: c_char,
    flags: c_char,
    pub(super) type_num: c_int,
}

/// `NPY_ARRAY_C_CONTIGUOUS`.
pub(super) const C_CONTIGUOUS: c_int = 0x0001;
/// `NPY_ARRAY_WRITEABLE`.
pub(super) const WRITEABLE: c_int = 0x0400;
/// `NPY_MAXDIMS` of NumPy 2 (NumPy 1.x: 32).
pub(super) const MAX_DIMS: c_int = 64;
/// The byte-order character of data in the other byte order than this machine's
/// (`NPY_OPPBYTE`).
pub(super) const SWAPPED: c_char = if cfg!(target_endian = "little") {
    b'>' as c_char
} else {
    b'<' as c_char
};

/// NumPy's builtin type numbers (`enum NPY_TYPES` of `ndarraytypes.h`, the same in
/// NumPy 1.x and 2.x) that NumPy's `__dlpack__` exports as they are, each with its
/// DLPack type: the one table that [`element_type`] reads. The C integer types have
/// their size on this platform. Every other type number is absent: `longdouble` (13,
/// whose export depends on the platform), object, string, datetime, structured and
/// user types.
const TYPES: [(c_int, DataType); 16] = [
    (0, DataType::BOOL),                     // NPY_BOOL
    (1, DataType::I8),                       // NPY_BYTE
    (2, DataType::U8),                       // NPY_UBYTE
    (3, c_integer::<c_short>(SIGNED)),       // NPY_SHORT
    (4, c_integer::<c_short>(UNSIGNED)),     // NPY_USHORT
    (5, c_integer::<c_int>(SIGNED)),         // NPY_INT
    (6, c_integer::<c_int>(UNSIGNED)),       // NPY_UINT
    (7, c_integer::<c_long>(SIGNED)),        // NPY_LONG
    (8, c_integer::<c_long>(UNSIGNED)),      // NPY_ULONG
    (9, c_integer::<c_longlong>(SIGNED)),    // NPY_LONGLONG
    (10, c_integer::<c_longlong>(UNSIGNED)), // NPY_ULONGLONG
    (11, DataType::F32),                     // NPY_FLOAT
    (12, DataType::F64),                     // NPY_DOUBLE
    (14, DataType::C64),                     // NPY_CFLOAT
    (15, DataType::C128),                    // NPY_CDOUBLE
    (23, DataType::F16),                     // NPY_HALF
];

const SIGNED: DLDataTypeCode = DLDataTypeCode::kDLInt;
const UNSIGNED: DLDataTypeCode = DLDataTypeCode::kDLUInt;

/// The DLPack type of the C integer type `T` (of at most 16 bytes), signed or not.
const fn c_integer<T>(code: DLDataTypeCode) -> DataType {
    DataType::new(code, (size_of::<T>() * 8) as u8, 1)
}

/// [`TYPES`] indexed by type number, with each type's item size: a lookup is one
/// bounds check and one load. (A type number of [`TYPES`] beyond this length is a
/// compile error.)
const BY_TYPE_NUMBER: [Option<(DataType, usize)>; 24] = {
    let mut by_number = [None; 24];
    let mut i = 0;
    while i < TYPES.len() {
        let (number, dtype) = TYPES[i];
        by_number[number as usize] = Some((dtype, dtype.size_in_bytes()));
        i += 1;
    }
    by_number
};

/// The element type and item size of a builtin NumPy type number that NumPy's
/// `__dlpack__` exports as it is ([`TYPES`]); `None` for every other.
pub(super) fn element_type(type_num: c_int) -> Option<(DataType, usize)> {
    *BY_TYPE_NUMBER.get(usize::try_from(type_num).ok()?)?
}

/// `NPY_USERDEF`: the first type number NumPy gives a registered user type (such as
/// `ml_dtypes.bfloat16`), in the order types register, so never a fixed one.
pub(super) const USER_DEFINED: c_int = 256;

/// The DLPack types NumPy's own `__dlpack__` gave arrays of user types, by type number
/// (each slot `type_num << 32 | code << 24 | bits << 16 | lanes`, 0 while empty):
/// learned from NumPy's export, never from a table, since a user type's number and its
/// DLPack type are what registration made them (NumPy 2.5's
/// `np.dtypes.register_dlpack_dtype`, which `ml_dtypes` 0.7 calls for its types when
/// imported). A few slots: a process registers a handful of such types.
static USER_TYPES: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];

/// The element type and item size that NumPy's `__dlpack__` gave an array of user type
/// `type_num` before ([`learn_user_type`]), if it did.
pub(super) fn user_element_type(type_num: c_int) -> Option<(DataType, usize)> {
    let number = u32::try_from(type_num).ok()?;
    USER_TYPES.iter().find_map(|slot| {
        let packed = slot.load(Ordering::Relaxed);
        ((packed >> 32) as u32 == number && packed != 0).then(|| {
            let code = DLDataTypeCode((packed >> 24) as u8);
            let dtype = DataType::new(code, (packed >> 16) as u8, packed as u16);
            (dtype, dtype.size_in_bytes())
        })
    })
}

/// Records that NumPy's `__dlpack__` exports arrays of user type `type_num` as `dtype`
/// (one element a whole number of bytes, one lane; anything else is not recorded, and
/// such arrays keep going through `__dlpack__`). The first answer for a type number is
/// kept; when the slots are full, nothing more is.
pub(super) fn learn_user_type(type_num: c_int, dtype: DataType) {
    let Ok(number) = u32::try_from(type_num) else {
        return;
    };
    if type_num < USER_DEFINED || dtype.lanes() != 1 || dtype.bits() % 8 != 0 || dtype.bits() == 0 {
        return;
    }
    let packed = u64::from(number) << 32
        | u64::from(dtype.code().0) << 24
        | u64::from(dtype.bits()) << 16
        | u64::from(dtype.lanes());
    for slot in &USER_TYPES {
        match slot.compare_exchange(0, packed, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(found) if (found >> 32) as u32 == number => return,
            Err(_) => {}
        }
    }
}

/// NumPy's C API, as far as it is used here.
pub(super) struct Api {
    /// `PyArray_Type`: a static type of NumPy's extension, which is never unloaded.
    pub(super) ndarray: NonNull<ffi::PyTypeObject>,
}

// SAFETY:
// - `ndarray` is the address of a static type object that lives as long as the
//   process and is only read (compared) here.
unsafe impl Send for Api {}
// SAFETY: as above; nothing behind the pointer is written through it.
unsafe impl Sync for Api {}

/// NumPy's API, once found.
static API: OnceLock<Api> = OnceLock::new();

/// The address of the last table found under NumPy's name that is not a NumPy this
/// module knows (0: none), so that it is not examined again at every import. (Not a
/// permanent "no": a module under NumPy's name may be replaced from Python, by a test
/// double for instance, and the real one put back.)
#[cfg(not(any(PyPy, GraalPy, Py_GIL_DISABLED)))]
static REJECTED: AtomicUsize = AtomicUsize::new(0);

/// NumPy's API, if NumPy is loaded and known. An error of the look-up that is not an
/// `Exception` (a `KeyboardInterrupt`) is raised; any other means "not now".
pub(super) fn api(py: Python<'_>) -> PyResult<Option<&'static Api>> {
    if let Some(api) = API.get() {
        return Ok(Some(api));
    }
    match find_api(py) {
        Ok(Some(found)) => Ok(Some(API.get_or_init(|| found))),
        Ok(None) => Ok(None),
        Err(err) if err.is_instance_of::<PyException>(py) => Ok(None),
        Err(err) => Err(err),
    }
}

/// NumPy's API if it was found by an earlier import (no look-up).
#[inline]
pub(super) fn api_found() -> Option<&'static Api> {
    API.get()
}

/// Looks NumPy's API up in `sys.modules` (nothing is imported here): `None` while it is
/// not there, or when what is there is not a NumPy this module knows.
///
/// What is found under NumPy's name is checked before any entry of its table is called:
/// the capsule's table lies in the same library as the module's `ndarray` type (Unix:
/// `dladdr`; an extension module's statics), and its entry 2 is that type, as in
/// NumPy's `PyArray_API`. (Elsewhere the module under NumPy's name is trusted to be
/// NumPy's, as every extension that imports NumPy's C API trusts it.)
#[cfg(not(any(PyPy, GraalPy, Py_GIL_DISABLED)))]
fn find_api(py: Python<'_>) -> PyResult<Option<Api>> {
    // SAFETY: the thread is attached (`py`).
    let modules = unsafe { ffi::PyImport_GetModuleDict() };
    // SAFETY: a borrowed reference to the interpreter's module dictionary (non-null),
    // which lives as long as the interpreter; a new reference is taken.
    let modules = unsafe { Bound::from_borrowed_ptr(py, modules) };
    let modules = modules.cast_into::<PyDict>()?;
    // (Errors of the look-up, a key's `__eq__` that raises, are the caller's.)
    let mut module = None;
    for name in [
        intern!(py, "numpy._core._multiarray_umath"),
        intern!(py, "numpy.core._multiarray_umath"),
    ] {
        module = modules.get_item(name)?;
        if module.is_some() {
            break;
        }
    }
    let Some(module) = module else {
        return Ok(None);
    };
    // (A module still being initialised has no `_ARRAY_API` yet: an `AttributeError`,
    // and the look-up is made again at the next import.)
    let capsule = module.getattr(intern!(py, "_ARRAY_API"))?;
    let ndarray = module.getattr(intern!(py, "ndarray"))?;
    // NumPy's capsule has no name (`PyCapsule_GetPointer` with NULL checks that).
    let table = match capsule.cast::<PyCapsule>() {
        Ok(capsule) => capsule.pointer_checked(None).ok(),
        Err(_) => None,
    };
    let Some(table) = table else {
        return Ok(None);
    };
    let table = table.as_ptr().cast::<*const c_void>();
    if REJECTED.load(Ordering::Relaxed) == table as usize {
        return Ok(None);
    }
    let reject = || {
        REJECTED.store(table as usize, Ordering::Relaxed);
        Ok(None)
    };
    // SAFETY: a live object; the thread is attached.
    let is_type = unsafe { ffi::PyType_Check(ndarray.as_ptr()) } != 0;
    if !is_type || !table.is_aligned() || !same_library(table.cast(), ndarray.as_ptr().cast()) {
        return reject();
    }
    let entry = |index: usize| {
        // SAFETY: a table in the library of NumPy's `ndarray` type (checked above), as
        // NumPy's `PyArray_API` is, which has more than 211 entries in every NumPy
        // since 1.4; entry 2 is read first, and the others only once it proved the
        // table NumPy's.
        unsafe { table.wrapping_add(index).read() }
    };
    // Entry 2 is `&PyArray_Type`: it must be the module's `ndarray` type before any
    // entry is called (another capsule of the module, `_UFUNC_API`, is nameless too).
    if entry(2) != ndarray.as_ptr().cast_const().cast() {
        return reject();
    }
    let version = |index: usize| {
        let f = entry(index);
        (!f.is_null()).then(|| {
            // SAFETY: entries 0 and 211 of NumPy's table are `unsigned int
            // PyArray_GetNDArrayCVersion(void)` and `unsigned int
            // PyArray_GetNDArrayCFeatureVersion(void)` in every NumPy since 1.4 (the
            // function pointer has that type).
            let f = unsafe {
                core::mem::transmute::<*const c_void, unsafe extern "C" fn() -> c_uint>(f)
            };
            // SAFETY: these functions only return a constant; any thread may call them.
            unsafe { f() }
        })
    };
    let known = match version(0) {
        Some(0x0200_0000) => true,
        // NumPy 1.22 (API version 15) added `__dlpack__`, and 1.25 (API version 17)
        // the export of booleans, which this module reads.
        Some(0x0100_0009) => version(211).is_some_and(|feature| feature >= 0x11),
        _ => false,
    };
    match NonNull::new(ndarray.as_ptr().cast::<ffi::PyTypeObject>()) {
        Some(ndarray) if known => Ok(Some(Api { ndarray })),
        _ => reject(),
    }
}

/// Whether `a` and `b` lie in the same loaded library (or executable), by `dladdr`.
#[cfg(all(unix, not(any(PyPy, GraalPy, Py_GIL_DISABLED))))]
fn same_library(a: *const c_void, b: *const c_void) -> bool {
    let base = |address: *const c_void| {
        let mut info = core::mem::MaybeUninit::<libc::Dl_info>::uninit();
        // SAFETY: `dladdr` only reads the process's tables of loaded objects and fills
        // `info` when it returns non-zero; any address may be asked about.
        let found = unsafe { libc::dladdr(address, info.as_mut_ptr()) } != 0;
        // SAFETY: filled by `dladdr`, which found the address.
        found.then(|| unsafe { info.assume_init() }.dli_fbase)
    };
    matches!((base(a), base(b)), (Some(x), Some(y)) if !x.is_null() && x == y)
}

/// (No `dladdr`: the module under NumPy's name is trusted, as NumPy's own C API users
/// trust it.)
#[cfg(not(any(unix, PyPy, GraalPy, Py_GIL_DISABLED)))]
fn same_library(_: *const c_void, _: *const c_void) -> bool {
    true
}

/// PyPy and GraalPy (whose objects are not NumPy's C structs as they are in CPython)
/// and free-threaded CPython (where another thread may change an array's struct while
/// it is read): `__dlpack__`.
#[cfg(any(PyPy, GraalPy, Py_GIL_DISABLED))]
fn find_api(_py: Python<'_>) -> PyResult<Option<Api>> {
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_types_follow_the_table() {
        for number in -1..=32 {
            let expected = TYPES.iter().find(|&&(n, _)| n == number);
            let found = element_type(number);
            assert_eq!(found.map(|(dtype, _)| dtype), expected.map(|&(_, d)| d));
            if let Some((dtype, itemsize)) = found {
                assert_eq!(itemsize * 8, usize::from(dtype.bits()));
            }
        }
        assert_eq!(
            element_type(7).map(|(d, _)| d.bits()),
            Some(c_long::BITS as u8)
        );
        assert_eq!(element_type(13), None); // longdouble
    }
}
