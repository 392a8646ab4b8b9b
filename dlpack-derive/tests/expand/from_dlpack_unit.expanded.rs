#[doc(hidden)]
const _: () = {
    use ::dlpack_core as _dlpack;
    #[automatically_derived]
    #[allow(unused_qualifications)]
    impl _dlpack::__private::FromDLPack for Empty {
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
            let __problems = _dlpack::__private::Problems::new();
            let _ = __problems;
            _dlpack::__private::Ok(Self)
        }
        fn select_in(__prefix: &str, _: &mut _dlpack::__private::Selection<'_>) {}
        fn load_dlpack_in(
            &mut self,
            __prefix: &str,
            __batch: &mut _dlpack::__private::TensorBatch,
            __report: &mut _dlpack::__private::LoadReport,
        ) -> _dlpack::__private::Result<()> {
            let __problems = _dlpack::__private::Problems::new();
            __problems.finish()
        }
    }
};
