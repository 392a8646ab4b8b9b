//! NumPy arrays read in place (feature `pyo3`), with an embedded interpreter and the
//! real NumPy: the tensor keeps its array alive whatever Python does with its own names,
//! and releases it once, from any thread. The test command also runs these under
//! AddressSanitizer, where a read of freed (and reused) memory is reported, not a lucky
//! value. NumPy must be importable (`PYTHONPATH`: the test venv's site-packages).

use std::ffi::CStr;
use std::sync::Arc;

use dlpack_core::ManagedTensor;
use dlpack_core::python::from_dlpack;
use ndarray::{Ix1, Ix2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Runs `f` attached to the interpreter, with NumPy imported as `numpy` in `globals`.
fn with_numpy<R>(f: impl for<'py> FnOnce(Python<'py>, &Bound<'py, PyDict>) -> R) -> R {
    Python::initialize();
    Python::attach(|py| {
        let globals = PyDict::new(py);
        let numpy = py
            .import("numpy")
            .expect("NumPy must be importable: PYTHONPATH names the test venv's site-packages");
        globals.set_item("numpy", numpy).unwrap();
        globals.set_item("gc", py.import("gc").unwrap()).unwrap();
        globals
            .set_item("weakref", py.import("weakref").unwrap())
            .unwrap();
        f(py, &globals)
    })
}

fn run(py: Python<'_>, globals: &Bound<'_, PyDict>, code: &CStr) {
    py.run(code, Some(globals), None).unwrap();
}

fn get<'py>(globals: &Bound<'py, PyDict>, name: &str) -> Bound<'py, PyAny> {
    globals.get_item(name).unwrap().unwrap()
}

/// Whether the array that `alive` (a weak reference) names is still alive.
fn alive(py: Python<'_>, globals: &Bound<'_, PyDict>) -> bool {
    run(py, globals, c"gc.collect()\nstill = alive() is not None");
    get(globals, "still").extract().unwrap()
}

/// Runs `code`, which makes the array `name` and a weak reference `alive` to what must
/// stay alive, imports the array, then lets go of Python's name for it: the import alone
/// keeps it alive.
fn import_then_let_go(
    py: Python<'_>,
    globals: &Bound<'_, PyDict>,
    code: &CStr,
    name: &str,
) -> ManagedTensor {
    run(py, globals, code);
    let tensor = from_dlpack(&get(globals, name)).unwrap();
    globals.del_item(name).unwrap();
    assert!(alive(py, globals));
    tensor
}

#[test]
fn a_tensor_keeps_its_array_after_python_lets_go() {
    with_numpy(|py, globals| {
        let code = c"a = numpy.arange(4096, dtype=numpy.float32)\nalive = weakref.ref(a)";
        let tensor = import_then_let_go(py, globals, code, "a");
        // Read in place: a header of ours (NumPy's `__dlpack__` says version 1.0).
        assert_eq!(tensor.version().map(|v| (v.major, v.minor)), Some((1, 3)));
        // Memory freed now would be reused by these.
        run(
            py,
            globals,
            c"junk = [numpy.full(4096, -1.0, dtype=numpy.float32) for _ in range(64)]",
        );
        let view = tensor.as_array::<f32, Ix1>().unwrap();
        assert!(view.iter().enumerate().all(|(i, &v)| v == i as f32));
        drop(tensor);
        assert!(!alive(py, globals));
    });
}

#[test]
fn a_view_of_a_temporary_keeps_the_whole_buffer() {
    with_numpy(|py, globals| {
        let code =
            c"b = numpy.arange(100.0).reshape(10, 10)[2:5, ::3]\nalive = weakref.ref(b.base)";
        let tensor = import_then_let_go(py, globals, code, "b");
        run(
            py,
            globals,
            c"junk = [numpy.full(100, -1.0) for _ in range(64)]",
        );
        assert!(alive(py, globals));
        let view = tensor.as_array::<f64, Ix2>().unwrap();
        assert_eq!(view.shape(), &[3, 4]);
        assert_eq!(view[[2, 3]], 49.0);
        drop(tensor);
        assert!(!alive(py, globals));
    });
}

#[test]
fn a_tensor_dropped_on_a_detached_thread_releases_its_array() {
    with_numpy(|py, globals| {
        let code = c"a = numpy.ones(64)\nalive = weakref.ref(a)";
        let tensor = import_then_let_go(py, globals, code, "a");
        // The dropping thread attaches to release the array while this one is detached.
        py.detach(move || std::thread::spawn(move || drop(tensor)).join())
            .unwrap();
        assert!(!alive(py, globals));
    });
}

/// The array's reference count, as `sys.getrefcount` reports it.
fn refcount(py: Python<'_>, array: &Py<PyAny>) -> usize {
    let sys = py.import("sys").unwrap();
    sys.call_method1("getrefcount", (array,))
        .unwrap()
        .extract()
        .unwrap()
}

/// Eight threads import one array, in place and (every other round) through its
/// `__dlpack__` capsule, whose NumPy deleter may run Python code, and drop the tensors
/// attached, detached while other threads run Python, or later: every release must see
/// whether its own thread is attached (before CPython 3.12 the "current thread state" is
/// the GIL holder's, not the caller's).
#[test]
fn eight_threads_import_one_array() {
    let array: Arc<Py<PyAny>> = with_numpy(|py, globals| {
        run(
            py,
            globals,
            c"a = numpy.arange(12.0, dtype=numpy.float32).reshape(3, 4)",
        );
        Arc::new(get(globals, "a").unbind())
    });
    let before = Python::attach(|py| refcount(py, &array));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let array = Arc::clone(&array);
            std::thread::spawn(move || {
                let mut kept: Vec<ManagedTensor> = Vec::new();
                for round in 0..300 {
                    let tensor = Python::attach(|py| {
                        let array = array.bind(py);
                        if round % 2 == 0 {
                            from_dlpack(array).unwrap()
                        } else {
                            let capsule = array.call_method0("__dlpack__").unwrap();
                            from_dlpack(&capsule).unwrap()
                        }
                    });
                    let sum: f32 = tensor.as_array::<f32, Ix2>().unwrap().sum();
                    assert_eq!(sum, 66.0);
                    // Some are dropped attached, some detached, some later.
                    match round % 3 {
                        0 => Python::attach(|_| drop(tensor)),
                        1 => drop(tensor),
                        _ => kept.push(tensor),
                    }
                }
                drop(kept);
            })
        })
        .collect();
    Python::attach(|py| py.detach(|| threads.into_iter().for_each(|t| t.join().unwrap())));
    Python::attach(|py| assert_eq!(refcount(py, &array), before));
}

/// Whatever holds torch's names in `sys.modules` (torch is not installed here), a NumPy
/// array is no torch tensor (its class does not derive from torch's static
/// `TensorBase`), and is written in place as ever: the stand-in is never asked.
#[test]
fn a_stand_in_for_torch_leaves_numpy_arrays_alone() {
    use dlpack_core::DLPackArray;
    let stand_ins: [&CStr; 6] = [
        // A module made in Python, with a class that claims torch's module.
        c"c = types.ModuleType('torch._C')
class TensorBase: pass
TensorBase.__module__ = 'torch._C'
c.TensorBase = TensorBase
c.is_grad_enabled = lambda: False
sys.modules['torch._C'] = c",
        // A subclass of the module type.
        c"class M(types.ModuleType): pass
sys.modules['torch._C'] = M('torch._C')",
        // Another extension module.
        c"import gc as c
c.TensorBase = type('TensorBase', (), {})
c.is_grad_enabled = c.isenabled
sys.modules['torch._C'] = c",
        // Not a module at all.
        c"sys.modules['torch._C'] = {'TensorBase': int}",
        c"sys.modules['torch._C'] = 7",
        c"sys.modules['torch._C'] = None",
    ];
    with_numpy(|py, globals| {
        run(py, globals, c"import sys, types");
        for code in stand_ins {
            run(py, globals, code);
            run(py, globals, c"a = numpy.ones(3, numpy.float32)");
            let a = get(globals, "a");
            let mut typed: DLPackArray<f32, Ix1> = a.extract().unwrap();
            // SAFETY: the test's own array, which nothing else reads or writes while
            // the view lives.
            unsafe { typed.assume_exclusive() }.unwrap();
            typed.view_mut().unwrap().fill(2.0);
            drop(typed);
            let sum: f32 = a.call_method0("sum").unwrap().extract().unwrap();
            assert_eq!(sum, 6.0, "{code:?}");
            run(py, globals, c"del sys.modules['torch._C']");
        }
    });
}
