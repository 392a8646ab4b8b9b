//! Derives on generic structs: type parameters with defaults, lifetimes, const parameters,
//! where-clauses, inferred bounds and `#[dlpack(bound = "...")]`.

use std::marker::PhantomData;

use dlpack_core::{DataType, Element, FromDLPack, TensorBatch, ToDLPack};
use ndarray::{Array, Array1, Array2, ArrayView1, Dimension, Ix1, Ix2, Ix3, array};

/// Both traits, with a batch on either side.
fn assert_batch<T>()
where
    T: ToDLPack<Output = TensorBatch> + FromDLPack<Input = TensorBatch>,
{
}

fn names(batch: &TensorBatch) -> Vec<&str> {
    batch.names().collect()
}

/// Type parameters with a default and a bound in the parameter list.
#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
struct Layer<T: Element, D: Dimension = Ix2> {
    weight: Array<T, D>,
    bias: Array1<T>,
}

#[test]
fn type_parameters_and_defaults() {
    assert_batch::<Layer<f32>>();
    assert_batch::<Layer<i8, Ix3>>();

    let layer: Layer<f64> = Layer {
        weight: Array2::eye(2),
        bias: array![1.0, 2.0],
    };
    let ptr = layer.weight.as_ptr();
    let batch = layer.to_dlpack().unwrap();
    assert_eq!(batch.get("weight").unwrap().dtype(), DataType::F64);
    let back = Layer::<f64>::from_dlpack(batch).unwrap();
    assert_eq!(back.weight, Array2::<f64>::eye(2));
    assert_eq!(back.weight.as_ptr(), ptr);

    let layer = Layer::<u16, Ix3> {
        weight: Array::zeros((1, 2, 3)),
        bias: array![1],
    };
    let back = Layer::<u16, Ix3>::from_dlpack(layer.to_dlpack().unwrap()).unwrap();
    assert_eq!(back.weight.dim(), (1, 2, 3));
}

/// A parameter that is a whole model, next to the struct's own where-clause: the
/// inferred bounds are `M: ToDLPack` and `Option<O>: ToDLPack` (`FromDLPack` for the
/// import); the skipped `u32` mentions no parameter and needs none.
#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
struct Checkpoint<M, O>
where
    O: Clone,
{
    model: M,
    optimizer: Option<O>,
    #[dlpack(skip)]
    epoch: u32,
}

#[test]
fn nested_generic_models_and_where_clauses() {
    assert_batch::<Checkpoint<Layer<f32>, Array1<f32>>>();
    let checkpoint = Checkpoint {
        model: Layer::<f32> {
            weight: Array2::ones((2, 2)),
            bias: array![0.0, 0.0],
        },
        optimizer: Some(array![0.9f32]),
        epoch: 3,
    };
    let batch = checkpoint.to_dlpack().unwrap();
    assert_eq!(names(&batch), ["model.weight", "model.bias", "optimizer"]);
    let back = Checkpoint::<Layer<f32>, Array1<f32>>::from_dlpack(batch).unwrap();
    assert_eq!(back.optimizer, Some(array![0.9]));
    assert_eq!(back.epoch, 0);
}

/// A skipped field of a parameter type: `FromDLPack` infers `S: Default` for it,
/// `ToDLPack` nothing.
#[derive(Debug, ToDLPack, FromDLPack)]
struct WithState<S> {
    data: Array1<f32>,
    #[dlpack(skip)]
    state: S,
}

struct NoDefault;

#[test]
fn skipped_parameter_fields_need_default_only_for_import() {
    let batch = WithState {
        data: array![1.0],
        state: NoDefault,
    }
    .to_dlpack()
    .unwrap();
    let back = WithState::<Vec<u8>>::from_dlpack(batch).unwrap();
    assert!(back.state.is_empty());
    assert_eq!(back.data, array![1.0]);
}

/// Lifetimes: borrowed arrays export as copies.
#[derive(ToDLPack)]
struct Borrowed<'a, 'b: 'a, T: Element> {
    weight: &'a Array2<T>,
    view: ArrayView1<'b, T>,
}

/// A lifetime on a skipped field; imports fill it with `Default`.
#[derive(Debug, ToDLPack, FromDLPack)]
struct Tagged<'a, T: Element> {
    data: Array1<T>,
    #[dlpack(skip)]
    tag: &'a str,
}

#[test]
fn lifetimes() {
    let weight = array![[1u32, 2], [3, 4]];
    let bias = array![5u32, 6, 7];
    let batch = Borrowed {
        weight: &weight,
        view: bias.slice(ndarray::s![..;2]),
    }
    .to_dlpack()
    .unwrap();
    assert_eq!(names(&batch), ["weight", "view"]);
    assert!(batch.iter().all(|(_, tensor)| tensor.is_copied()));
    let view = batch.get("view").unwrap().as_array::<u32, Ix1>().unwrap();
    assert_eq!(view, array![5, 7]);
    let copy = batch.get("weight").unwrap().as_array::<u32, Ix2>().unwrap();
    assert_eq!(copy, weight);

    let tagged = Tagged {
        data: array![1i16],
        tag: "kept out",
    };
    let back = Tagged::<i16>::from_dlpack(tagged.to_dlpack().unwrap()).unwrap();
    assert_eq!(back.tag, "");
    assert_eq!(back.data, array![1]);
}

/// Const parameters pass through.
#[derive(Debug, ToDLPack, FromDLPack)]
struct Fixed<const N: usize, T: Element = f32> {
    data: Array1<T>,
}

impl<const N: usize, T: Element> Fixed<N, T> {
    fn len(&self) -> usize {
        N.min(self.data.len())
    }
}

#[test]
fn const_parameters() {
    assert_batch::<Fixed<3>>();
    let batch = Fixed::<3> {
        data: array![1.0, 2.0, 3.0, 4.0],
    }
    .to_dlpack()
    .unwrap();
    assert_eq!(Fixed::<3>::from_dlpack(batch).unwrap().len(), 3);
}

/// An associated type behind a trait: the inferred bound is on `B::Weights`.
trait Backend {
    type Weights;
}

struct Cpu;

impl Backend for Cpu {
    type Weights = Array2<f32>;
}

#[derive(ToDLPack, FromDLPack)]
struct OnBackend<B: Backend> {
    weights: B::Weights,
    #[dlpack(skip)]
    backend: PhantomData<B>,
}

#[test]
fn associated_types() {
    assert_batch::<OnBackend<Cpu>>();
    let model = OnBackend::<Cpu> {
        weights: Array2::zeros((2, 3)),
        backend: PhantomData,
    };
    let batch = model.to_dlpack().unwrap();
    assert_eq!(names(&batch), ["weights"]);
    let back = OnBackend::<Cpu>::from_dlpack(batch).unwrap();
    assert_eq!(back.weights.dim(), (2, 3));
}

/// `bound = "..."` replaces the inferred bounds: here `T: Element` is enough for every
/// field, and the user's own where-clause is kept.
#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
#[dlpack(bound = "T: Element")]
struct Explicit<T, U>
where
    U: Copy,
{
    first: Array1<T>,
    rest: Vec<Array1<T>>,
    #[dlpack(skip)]
    marker: PhantomData<U>,
}

/// An empty `bound` removes every inferred bound.
#[derive(ToDLPack, FromDLPack)]
#[dlpack(bound = "")]
struct Unbounded<U> {
    data: Array1<f32>,
    #[dlpack(skip)]
    marker: PhantomData<fn() -> U>,
}

#[test]
fn explicit_bounds() {
    assert_batch::<Explicit<bool, u8>>();
    assert_batch::<Unbounded<NoDefault>>();
    let explicit = Explicit::<bool, u8> {
        first: array![true],
        rest: vec![array![false, true]],
        marker: PhantomData,
    };
    let batch = explicit.to_dlpack().unwrap();
    assert_eq!(names(&batch), ["first", "rest.0"]);
    let back = Explicit::<bool, u8>::from_dlpack(batch).unwrap();
    assert_eq!(back.rest, [array![false, true]]);

    let batch = Unbounded::<NoDefault> {
        data: array![1.0],
        marker: PhantomData,
    }
    .to_dlpack()
    .unwrap();
    assert_eq!(
        Unbounded::<NoDefault>::from_dlpack(batch).unwrap().data,
        array![1.0]
    );
}

/// A generic tuple struct.
#[derive(Debug, PartialEq, ToDLPack, FromDLPack)]
struct Pair<A, B>(A, B);

#[test]
fn generic_tuple_structs() {
    assert_batch::<Pair<Array1<f32>, Pair<Array1<i8>, Array1<i8>>>>();
    let pair = Pair(array![1.0f32], Pair(array![1i8], array![2i8]));
    let batch = pair.to_dlpack().unwrap();
    assert_eq!(names(&batch), ["0", "1.0", "1.1"]);
    let back = Pair::<Array1<f32>, Pair<Array1<i8>, Array1<i8>>>::from_dlpack(batch).unwrap();
    assert_eq!(back.1, Pair(array![1], array![2]));
}
