//! A PyTorch-style `state_dict` for a small MLP: export the model as named tensors,
//! inspect them by name, and load them back without copying.
//!
//! Run with `cargo run -p model-state-dict`.

mod mlp {
    use dlpack_core::ndarray::{Array1, Array2, Ix1};
    use dlpack_core::{FromDLPack, Result, TensorBatch, ToDLPack};

    /// `y = W x + b`.
    #[derive(ToDLPack, FromDLPack)]
    struct Linear {
        weight: Array2<f32>,
        bias: Array1<f32>,
    }

    impl Linear {
        /// A layer with small deterministic weights (a stand-in for a random init).
        fn new(fan_in: usize, fan_out: usize, seed: usize) -> Self {
            let weight = Array2::from_shape_fn((fan_out, fan_in), |(i, j)| {
                ((i * 7 + j * 3 + seed) % 11) as f32 / 10.0 - 0.5
            });
            Self {
                weight,
                bias: Array1::from_elem(fan_out, 0.01 * seed as f32),
            }
        }

        fn forward(&self, x: &Array1<f32>) -> Array1<f32> {
            self.weight.dot(x) + &self.bias
        }
    }

    /// Hidden layers with ReLU, then an output layer.
    #[derive(ToDLPack, FromDLPack)]
    struct Mlp {
        hidden: Vec<Linear>,
        #[dlpack(rename = "out")]
        output: Linear,
        /// Training bookkeeping, not a tensor: skipped, and `0` after loading.
        #[dlpack(skip)]
        steps: u64,
    }

    impl Mlp {
        fn new(sizes: &[usize], classes: usize) -> Self {
            let hidden = sizes
                .windows(2)
                .enumerate()
                .map(|(seed, w)| Linear::new(w[0], w[1], seed))
                .collect();
            let last = sizes.last().copied().unwrap_or(1);
            Self {
                hidden,
                output: Linear::new(last, classes, sizes.len()),
                steps: 1000,
            }
        }

        fn forward(&self, x: &Array1<f32>) -> Array1<f32> {
            let x = self
                .hidden
                .iter()
                .fold(x.clone(), |x, layer| layer.forward(&x).mapv(|v| v.max(0.0)));
            self.output.forward(&x)
        }
    }

    pub(crate) fn run() -> Result<()> {
        let mlp = Mlp::new(&[4, 16, 8], 3);
        println!("steps before export: {}", mlp.steps);
        let x = Array1::linspace(-1.0, 1.0, 4);
        let y = mlp.forward(&x);
        let first_weight = mlp.hidden[0].weight.as_ptr();

        // Export: every array moves into a named tensor, nothing is copied.
        let state_dict: TensorBatch = mlp.to_dlpack()?;
        println!("{:<18} {:<10} dtype", "name", "shape");
        for (name, tensor) in &state_dict {
            let shape = format!("{:?}", tensor.shape());
            println!("{name:<18} {shape:<10} {}", tensor.dtype());
        }

        // Look at one tensor by name, through a checked, borrowed view.
        let bias = state_dict
            .get("out.bias")
            .expect("the output layer is renamed `out`");
        println!("out.bias = {}", bias.as_array::<f32, Ix1>()?);

        // Import: strict, like `load_state_dict`; our own arrays come back as they left.
        let mlp = Mlp::from_dlpack(state_dict)?;
        assert_eq!(mlp.forward(&x), y);
        assert_eq!(mlp.hidden[0].weight.as_ptr(), first_weight);
        println!(
            "loaded back: same outputs, no copies, steps = {}",
            mlp.steps
        );
        Ok(())
    }
}

fn main() -> dlpack_core::Result<()> {
    mlp::run()
}
