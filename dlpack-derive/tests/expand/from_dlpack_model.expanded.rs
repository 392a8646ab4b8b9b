#[doc(hidden)]
const _: () = {
    use ::dlpack_core as _dlpack;
    #[automatically_derived]
    #[allow(unused_qualifications)]
    impl<'a, T: Element, D> _dlpack::__private::FromDLPack for Model<'a, T, D>
    where
        D: Dimension,
        Array<T, D>: _dlpack::__private::FromDLPack,
        Option<Array1<T>>: _dlpack::__private::FromDLPack,
        Vec<Layer<T>>: _dlpack::__private::FromDLPack,
        Counter<T>: _dlpack::__private::Default,
    {
        type Input = _dlpack::__private::TensorBatch;
        fn from_dlpack(
            __input: _dlpack::__private::TensorBatch,
        ) -> _dlpack::__private::Result<Self> {
            _dlpack::__private::strict_from(__input)
        }
        fn from_dlpack_in(
            __prefix: &str,
            __batch: &mut _dlpack::__private::TensorBatch,
        ) -> _dlpack::__private::Result<Self> {
            _dlpack::__private::Ok(Self {
                weight: <Array<
                    T,
                    D,
                > as _dlpack::__private::FromDLPack>::from_dlpack_in(
                    &_dlpack::__private::join_name(__prefix, "weight"),
                    __batch,
                )?,
                bias: <Option<
                    Array1<T>,
                > as _dlpack::__private::FromDLPack>::from_dlpack_in(
                    &_dlpack::__private::join_name(__prefix, "b"),
                    __batch,
                )?,
                head: <Head as _dlpack::__private::FromDLPack>::from_dlpack_in(
                    __prefix,
                    __batch,
                )?,
                layers: <Vec<
                    Layer<T>,
                > as _dlpack::__private::FromDLPack>::from_dlpack_in(
                    &_dlpack::__private::join_name(__prefix, "layers"),
                    __batch,
                )?,
                name: <&'a str as _dlpack::__private::Default>::default(),
                steps: <Counter<T> as _dlpack::__private::Default>::default(),
            })
        }
    }
};
