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
    #[automatically_derived]
    #[allow(unused_qualifications)]
    impl<
        __DlpackMarker: ?::core::marker::Sized,
    > _dlpack::__private::TensorFieldsOf<__DlpackMarker> for Empty {
        fn visit_tensors(
            &self,
            _: &mut _dlpack::__private::String,
            _: &mut dyn ::core::ops::FnMut(&str, &dyn _dlpack::__private::TensorField),
        ) {}
        fn find_tensor(&self, __path: &str) -> _dlpack::__private::Found<'_> {
            if __path.is_empty() {
                return _dlpack::__private::Found::Group;
            }
            _dlpack::__private::Found::Nothing
        }
        fn field_names() -> &'static [&'static str] {
            &[]
        }
        fn find_tensor_mut(
            &mut self,
            _: &str,
        ) -> _dlpack::__private::Option<&mut dyn _dlpack::__private::TensorField> {
            _dlpack::__private::None
        }
    }
};
