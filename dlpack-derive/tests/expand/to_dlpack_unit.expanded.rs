#[doc(hidden)]
const _: () = {
    use ::dlpack_core as _dlpack;
    #[automatically_derived]
    #[allow(unused_qualifications)]
    impl _dlpack::__private::ToDLPack for Empty {
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
            _dlpack::__private::Ok(())
        }
    }
};
