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
            let mut __problems = _dlpack::__private::Problems::new();
            let __field0 = __problems
                .field(
                    <Array<
                        T,
                        D,
                    > as _dlpack::__private::FromDLPack>::from_dlpack_in(
                        &_dlpack::__private::join_name(__prefix, "weight"),
                        __batch,
                    ),
                );
            let __field1 = __problems
                .field(
                    <Option<
                        Array1<T>,
                    > as _dlpack::__private::FromDLPack>::from_dlpack_in(
                        &_dlpack::__private::join_name(__prefix, "b"),
                        __batch,
                    ),
                );
            let __field2 = __problems
                .field(
                    <Head as _dlpack::__private::FromDLPack>::from_dlpack_in(
                        __prefix,
                        __batch,
                    ),
                );
            let __field3 = __problems
                .field(
                    <Vec<
                        Layer<T>,
                    > as _dlpack::__private::FromDLPack>::from_dlpack_in(
                        &_dlpack::__private::join_name(__prefix, "layers"),
                        __batch,
                    ),
                );
            let (
                _dlpack::__private::Some(__field0),
                _dlpack::__private::Some(__field1),
                _dlpack::__private::Some(__field2),
                _dlpack::__private::Some(__field3),
            ) = (__field0, __field1, __field2, __field3) else {
                return _dlpack::__private::Err(__problems.into_error());
            };
            let _ = __problems;
            _dlpack::__private::Ok(Self {
                weight: __field0,
                bias: __field1,
                head: __field2,
                layers: __field3,
                name: <&'a str as _dlpack::__private::Default>::default(),
                steps: <Counter<T> as _dlpack::__private::Default>::default(),
            })
        }
        fn select_in(
            __prefix: &str,
            __selection: &mut _dlpack::__private::Selection<'_>,
        ) {
            <Array<
                T,
                D,
            > as _dlpack::__private::FromDLPack>::select_in(
                &_dlpack::__private::join_name(__prefix, "weight"),
                __selection,
            );
            <Option<
                Array1<T>,
            > as _dlpack::__private::FromDLPack>::select_in(
                &_dlpack::__private::join_name(__prefix, "b"),
                __selection,
            );
            <Head as _dlpack::__private::FromDLPack>::select_in(__prefix, __selection);
            <Vec<
                Layer<T>,
            > as _dlpack::__private::FromDLPack>::select_in(
                &_dlpack::__private::join_name(__prefix, "layers"),
                __selection,
            );
        }
        fn load_dlpack_in(
            &mut self,
            __prefix: &str,
            __batch: &mut _dlpack::__private::TensorBatch,
            __report: &mut _dlpack::__private::LoadReport,
        ) -> _dlpack::__private::Result<()> {
            let mut __problems = _dlpack::__private::Problems::new();
            __problems
                .check(
                    <Array<
                        T,
                        D,
                    > as _dlpack::__private::FromDLPack>::load_dlpack_in(
                        &mut self.weight,
                        &_dlpack::__private::join_name(__prefix, "weight"),
                        __batch,
                        __report,
                    ),
                );
            __problems
                .check(
                    <Option<
                        Array1<T>,
                    > as _dlpack::__private::FromDLPack>::load_dlpack_in(
                        &mut self.bias,
                        &_dlpack::__private::join_name(__prefix, "b"),
                        __batch,
                        __report,
                    ),
                );
            __problems
                .check(
                    <Head as _dlpack::__private::FromDLPack>::load_dlpack_in(
                        &mut self.head,
                        __prefix,
                        __batch,
                        __report,
                    ),
                );
            __problems
                .check(
                    <Vec<
                        Layer<T>,
                    > as _dlpack::__private::FromDLPack>::load_dlpack_in(
                        &mut self.layers,
                        &_dlpack::__private::join_name(__prefix, "layers"),
                        __batch,
                        __report,
                    ),
                );
            __problems.finish()
        }
    }
};
