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
            _dlpack::__private::Ok(
                Self(
                    <Array1<
                        T,
                    > as _dlpack::__private::FromDLPack>::from_dlpack_in(
                        &_dlpack::__private::join_name(__prefix, "0"),
                        __batch,
                    )?,
                    <PhantomData<T> as _dlpack::__private::Default>::default(),
                ),
            )
        }
    }
};
