#[doc(hidden)]
const _: () = {
    use my::reexport as _dlpack;
    #[automatically_derived]
    #[allow(unused_qualifications)]
    impl<T> _dlpack::__private::ToDLPack for Pair<T>
    where
        T: Element,
    {
        type Output = _dlpack::__private::TensorBatch;
        fn to_dlpack(
            self,
        ) -> _dlpack::__private::Result<_dlpack::__private::TensorBatch> {
            _dlpack::__private::batch_of(self)
        }
        fn to_dlpack_into(
            self,
            __prefix: &str,
            __batch: &mut _dlpack::__private::TensorBatch,
        ) -> _dlpack::__private::Result<()> {
            <Array1<
                T,
            > as _dlpack::__private::ToDLPack>::to_dlpack_into(
                self.0,
                &_dlpack::__private::join_name(__prefix, "0"),
                __batch,
            )?;
            _dlpack::__private::Ok(())
        }
    }
};
