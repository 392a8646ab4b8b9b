//! A Rust model as a Python object (`#[pymodel]`, features `pyo3` and `derive`), with an
//! embedded interpreter and the real NumPy: a view of a field keeps its memory alive when
//! the field is replaced and when the object is gone (under AddressSanitizer a read of
//! freed memory is reported, not a lucky value), Rust writes copy first while a view
//! lives, every share is released, and hostile input is a Python exception. NumPy must
//! be importable (`PYTHONPATH`: the test venv's site-packages).

use std::ffi::CStr;

use dlpack_core::implement::TensorFields;
use dlpack_core::{FromDLPack, Parameter, Parameter1, Parameter2, ToDLPack, pymodel};
use ndarray::{Array1, Array2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

#[derive(ToDLPack, FromDLPack)]
struct Linear {
    weight: Parameter2<f32>,
    bias: Parameter1<f32>,
}

#[pyclass]
#[derive(ToDLPack, FromDLPack)]
struct Mlp {
    fc1: Linear,
    layers: Vec<Linear>,
}

#[pymodel]
#[pymethods]
impl Mlp {}

fn linear(rows: usize, cols: usize, value: f32) -> Linear {
    Linear {
        weight: Parameter::from(Array2::from_elem((rows, cols), value)),
        bias: Parameter::from(Array1::from_elem(rows, value)),
    }
}

fn mlp() -> Mlp {
    Mlp {
        fc1: linear(4, 3, 1.5),
        layers: vec![linear(2, 2, 2.5), linear(2, 2, 3.5)],
    }
}

/// Runs `f` attached to the interpreter, with NumPy as `numpy`, `gc`, and a fresh model
/// as `m` in `globals`.
fn with_model<R>(
    f: impl for<'py> FnOnce(Python<'py>, &Bound<'py, PyDict>, &Bound<'py, Mlp>) -> R,
) -> R {
    Python::initialize();
    Python::attach(|py| {
        let globals = PyDict::new(py);
        let numpy = py
            .import("numpy")
            .expect("NumPy must be importable: PYTHONPATH names the test venv's site-packages");
        globals.set_item("numpy", numpy).unwrap();
        globals.set_item("gc", py.import("gc").unwrap()).unwrap();
        let model = Bound::new(py, mlp()).unwrap();
        globals.set_item("m", &model).unwrap();
        f(py, &globals, &model)
    })
}

fn run(py: Python<'_>, globals: &Bound<'_, PyDict>, code: &CStr) {
    if let Err(e) = py.run(code, Some(globals), None) {
        panic!("{code:?} raised {e}");
    }
}

fn raises(py: Python<'_>, globals: &Bound<'_, PyDict>, code: &CStr) -> String {
    match py.run(code, Some(globals), None) {
        Ok(()) => panic!("{code:?} raised nothing"),
        Err(e) => format!("{}: {}", e.get_type(py).name().unwrap(), e.value(py)),
    }
}

/// Allocates and fills memory of the sizes just freed, so that a dangling view would
/// read it (ASan reports the read itself).
const CHURN: &CStr = c"junk = [numpy.full(12, 9.0, numpy.float32) for _ in range(200)]";

#[test]
fn a_view_keeps_its_memory_when_the_field_is_replaced() {
    with_model(|py, globals, model| {
        run(
            py,
            globals,
            c"w = numpy.from_dlpack(m.fc1.weight)\nassert w.flags.writeable",
        );
        let ptr = model.borrow().fc1.weight.view().as_ptr() as usize;
        run(py, globals, c"ptr = w.ctypes.data");
        assert_eq!(
            globals
                .get_item("ptr")
                .unwrap()
                .unwrap()
                .extract::<usize>()
                .unwrap(),
            ptr
        );
        model.borrow_mut().fc1.weight = Parameter::from(Array2::zeros((4, 3)));
        run(py, globals, c"gc.collect()");
        run(py, globals, CHURN);
        run(
            py,
            globals,
            c"assert (w == 1.5).all(), w\nw += 1.0\nassert (w == 2.5).all()",
        );
        assert!(model.borrow().fc1.weight.view().iter().all(|&v| v == 0.0));
    });
}

#[test]
fn a_view_outlives_the_object() {
    with_model(|py, globals, _| {
        run(
            py,
            globals,
            c"w = numpy.from_dlpack(m.layers[1].weight)\nsd = m.state_dict()\ndel m\ngc.collect()",
        );
        run(py, globals, CHURN);
        run(
            py,
            globals,
            c"assert (w == 3.5).all()\nassert (numpy.from_dlpack(sd['fc1.bias']) == 1.5).all()",
        );
    });
}

#[test]
fn rust_writes_copy_first_while_a_view_lives_and_every_share_is_released() {
    with_model(|py, globals, model| {
        let ptr = model.borrow().fc1.weight.view().as_ptr();
        // No view: written in place.
        model
            .borrow_mut()
            .fc1
            .weight
            .view_mut()
            .mapv_inplace(|v| v * 2.0);
        assert_eq!(model.borrow().fc1.weight.view().as_ptr(), ptr);
        run(
            py,
            globals,
            c"w = numpy.from_dlpack(m.fc1.weight)\nw[0, 0] = 7.0",
        );
        // Python's write is the struct's.
        assert_eq!(model.borrow().fc1.weight.view()[[0, 0]], 7.0);
        assert!(model.borrow().fc1.weight.is_shared());
        // A view lives: the Rust write gets a fresh buffer; the view keeps the old one.
        model
            .borrow_mut()
            .fc1
            .weight
            .view_mut()
            .mapv_inplace(|v| v + 1.0);
        assert_ne!(model.borrow().fc1.weight.view().as_ptr(), ptr);
        run(py, globals, c"assert w[0, 0] == 7.0 and w[0, 1] == 3.0");
        assert_eq!(model.borrow().fc1.weight.view()[[0, 0]], 8.0);
        // Every share is released with its last Python holder.
        run(
            py,
            globals,
            c"sd = m.state_dict()\nv = numpy.from_dlpack(m.fc1.bias)",
        );
        assert!(model.borrow().fc1.bias.is_shared());
        run(py, globals, c"del w, sd, v\ngc.collect()");
        let this = model.borrow();
        assert!(!this.fc1.weight.is_shared() && !this.fc1.bias.is_shared());
        assert!(
            this.layers
                .iter()
                .all(|l| !l.weight.is_shared() && !l.bias.is_shared())
        );
    });
}

#[test]
fn a_field_keeps_one_python_object_until_rust_writes_it() {
    with_model(|py, globals, model| {
        run(
            py,
            globals,
            c"w = m.fc1.weight\nassert m.fc1.weight is w and m.state_dict()['fc1.weight'] is w",
        );
        let ptr = model.borrow().fc1.weight.view().as_ptr();
        assert!(model.borrow().fc1.weight.is_shared()); // `w` holds it
        // Only the field keeps its object: no holder, and a write in place.
        run(py, globals, c"del w\nm.fc1.weight");
        assert!(!model.borrow().fc1.weight.is_shared());
        run(py, globals, c"m.fc1.weight");
        model.borrow_mut().fc1.weight.view_mut().fill(5.0);
        assert_eq!(model.borrow().fc1.weight.view().as_ptr(), ptr);
        // Held across a Rust write: copied first; the next read is a new object.
        run(py, globals, c"w = m.fc1.weight\na = numpy.from_dlpack(w)");
        model.borrow_mut().fc1.weight.view_mut().fill(6.0);
        assert_ne!(model.borrow().fc1.weight.view().as_ptr(), ptr);
        run(
            py,
            globals,
            c"assert m.fc1.weight is not w and (a == 5.0).all()
assert (numpy.from_dlpack(m.fc1.weight) == 6.0).all()
del w
assert (a == 5.0).all()",
        );
        // A field that Rust replaces reads as a new object too.
        run(py, globals, c"b = m.layers[0].bias");
        model.borrow_mut().layers[0].bias = Parameter::from(Array1::from_elem(2, 9.0));
        run(
            py,
            globals,
            c"assert m.layers[0].bias is not b and (numpy.from_dlpack(m.layers[0].bias) == 9.0).all()
assert (numpy.from_dlpack(b) == 2.5).all()",
        );
    });
}

#[test]
fn a_field_is_looked_at_and_let_go_on_another_thread_without_waiting_for_the_gil() {
    with_model(|py, globals, model| {
        // Only the field's own object holds the buffer.
        run(py, globals, c"m.fc1.weight\nm.fc1.bias");
        {
            let this = model.borrow();
            let weight = &this.fc1.weight;
            // This thread holds the GIL and waits: a look that attached would never
            // return. Without it, the field's object counts as a holder.
            let shared = std::thread::scope(|s| s.spawn(|| weight.is_shared()).join().unwrap());
            assert!(shared);
            // Attached, it looks, and lets the object go.
            assert!(!weight.is_shared());
        }
        // A field with its object, dropped on a thread that is not attached while this
        // one holds the GIL: released later, never waiting for the GIL.
        let old = std::mem::replace(
            &mut model.borrow_mut().fc1.bias,
            Parameter::from(Array1::from_elem(4, 1.0)),
        );
        std::thread::scope(|s| s.spawn(move || drop(old)).join().unwrap());
        run(
            py,
            globals,
            c"assert (numpy.from_dlpack(m.fc1.bias) == 1.0).all()",
        );
    });
}

#[test]
fn load_state_dict_in_place_and_pytorchs_errors() {
    with_model(|py, globals, model| {
        let ptr = model.borrow().fc1.weight.view().as_ptr();
        run(
            py,
            globals,
            c"sd = {k: numpy.from_dlpack(v) + 1.0 for k, v in m.state_dict().items()}
r = m.load_state_dict(sd)
assert r.missing_keys == [] and r.unexpected_keys == []
assert (numpy.from_dlpack(m.fc1.weight) == 2.5).all()",
        );
        assert_eq!(model.borrow().fc1.weight.view().as_ptr(), ptr);
        let message = raises(
            py,
            globals,
            c"del sd['layers.1.bias']\nsd['extra'] = sd['fc1.bias']\nm.load_state_dict(sd)",
        );
        assert_eq!(
            message,
            "RuntimeError: Error(s) in loading state_dict for Mlp:\n\t\
             Missing key(s) in state_dict: \"layers.1.bias\". \n\t\
             Unexpected key(s) in state_dict: \"extra\". "
        );
        run(
            py,
            globals,
            c"r = m.load_state_dict(sd, strict=False)
assert r.missing_keys == ['layers.1.bias'] and r.unexpected_keys == ['extra']",
        );
    });
}

#[test]
fn hostile_input_is_a_python_exception() {
    with_model(|py, globals, model| {
        let cases: [(&CStr, &str); 14] = [
            (c"m.layers[2**70]", "IndexError"),
            (c"m.layers[-3]", "IndexError"),
            (c"m.layers['x']", "KeyError"),
            (c"m.layers[1.5]", "TypeError"),
            (c"m.fc1.weight = object()", "TypeError"),
            (c"m.fc1.weight = numpy.ones((4, 3))", "TypeError"),
            (
                c"m.fc1.weight = numpy.broadcast_to(numpy.float32(1), (2**40, 3))",
                "ValueError",
            ),
            (
                c"m.fc1.bias = numpy.ones((5,), numpy.float32)",
                "ValueError",
            ),
            (c"m.load_state_dict({1: numpy.ones(3)})", "TypeError"),
            (c"m.load_state_dict({'fc1.bias': 'no'})", "TypeError"),
            (c"m.load_state_dict([1, 2])", "TypeError"),
            (
                c"m.load_state_dict({'fc1.bias': numpy.ones(4, numpy.float64)})",
                "RuntimeError",
            ),
            (c"getattr(m, '')", "AttributeError"),
            (c"getattr(m, 'fc1..weight')", "AttributeError"),
        ];
        for (code, expected) in cases {
            let message = raises(py, globals, code);
            assert!(message.starts_with(expected), "{code:?}: {message}");
        }
        // A `__dlpack__` that raises: its error, and the model unchanged.
        run(
            py,
            globals,
            c"class Bad:
    def __dlpack__(self, **kw): raise ValueError('no')
try:
    m.fc1.bias = Bad()
except ValueError as e:
    assert str(e) == 'no'
else:
    raise AssertionError",
        );
        assert!(model.borrow().fc1.bias.view().iter().all(|&v| v == 1.5));
        let mut names = Vec::new();
        model
            .borrow()
            .visit_tensors(&mut String::new(), &mut |n, _| names.push(n.to_owned()));
        assert_eq!(names.len(), 6);
    });
}

#[test]
fn a_bool_tensor_python_wrote_comes_back_checked() {
    use dlpack_core::python::Tensor;
    use dlpack_core::{Error, ManagedTensor};
    use std::sync::Arc;

    with_model(|py, globals, _| {
        let exported = Array1::from_elem(3, true).to_dlpack().unwrap();
        let object = Bound::new(py, Tensor::new(exported)).unwrap();
        globals.set_item("t", &object).unwrap();
        // A consumer stores a byte that is no `bool`, then lets go.
        run(
            py,
            globals,
            c"a = numpy.from_dlpack(t)\na.view(numpy.uint8)[1] = 2\ndel a, t\ngc.collect()",
        );
        let shared = object.get().to_arc();
        drop(object);
        let tensor: ManagedTensor = Arc::try_unwrap(shared).ok().unwrap();
        // Not taken back as it is: checked, and refused.
        let tensor = tensor.into_owner::<Array1<bool>>().unwrap_err();
        let err = Array1::<bool>::from_dlpack(tensor).unwrap_err();
        assert!(
            matches!(err, Error::InvalidBool { index: 1, byte: 2 }),
            "{err}"
        );
    });
}
