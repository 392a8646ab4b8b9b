#[doc(hidden)]
const _: () = {
    use my::reexport as _dlpack;
    #[automatically_derived]
    #[allow(unused_qualifications)]
    impl<T> _dlpack::__private::FromDLPack for Pair<T>
    where
        T: Element,
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
                    <Array1<
                        T,
                    > as _dlpack::__private::FromDLPack>::from_dlpack_in(
                        &_dlpack::__private::join_name(__prefix, "0"),
                        __batch,
                    ),
                );
            let (_dlpack::__private::Some(__field0),) = (__field0,) else {
                return _dlpack::__private::Err(__problems.into_error());
            };
            let _ = __problems;
            _dlpack::__private::Ok(
                Self(
                    __field0,
                    <PhantomData<T> as _dlpack::__private::Default>::default(),
                ),
            )
        }
        fn select_in(
            __prefix: &str,
            __selection: &mut _dlpack::__private::Selection<'_>,
        ) {
            <Array1<
                T,
            > as _dlpack::__private::FromDLPack>::select_in(
                &_dlpack::__private::join_name(__prefix, "0"),
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
                    <Array1<
                        T,
                    > as _dlpack::__private::FromDLPack>::load_dlpack_in(
                        &mut self.0,
                        &_dlpack::__private::join_name(__prefix, "0"),
                        __batch,
                        __report,
                    ),
                );
            __problems.finish()
        }
    }
};
