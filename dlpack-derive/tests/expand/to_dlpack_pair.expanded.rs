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
    #[automatically_derived]
    #[allow(unused_qualifications)]
    impl<
        T,
        __DlpackMarker: ?::core::marker::Sized,
    > _dlpack::__private::TensorFieldsOf<__DlpackMarker> for Pair<T>
    where
        Array1<T>: _dlpack::__private::TensorFieldsOf<__DlpackMarker>,
    {
        fn visit_tensors(
            &self,
            __name: &mut _dlpack::__private::String,
            __visit: &mut dyn ::core::ops::FnMut(
                &str,
                &dyn _dlpack::__private::TensorField,
            ),
        ) {
            let __len = _dlpack::__private::push_segment(__name, "0");
            <Array1<
                T,
            > as _dlpack::__private::TensorFieldsOf<
                __DlpackMarker,
            >>::visit_tensors(&self.0, __name, __visit);
            __name.truncate(__len);
        }
        fn find_tensor(&self, __path: &str) -> _dlpack::__private::Found<'_> {
            if __path.is_empty() {
                return _dlpack::__private::Found::Group;
            }
            let (__head, __rest) = _dlpack::__private::split_path(__path);
            match __head {
                "0" => {
                    return <Array1<
                        T,
                    > as _dlpack::__private::TensorFieldsOf<
                        __DlpackMarker,
                    >>::find_tensor(&self.0, __rest);
                }
                _ => {}
            }
            _dlpack::__private::Found::Nothing
        }
        fn field_names() -> &'static [&'static str] {
            &["0"]
        }
        fn find_tensor_mut(
            &mut self,
            __path: &str,
        ) -> _dlpack::__private::Option<&mut dyn _dlpack::__private::TensorField> {
            let (__head, __rest) = _dlpack::__private::split_path(__path);
            match __head {
                "0" => {
                    return <Array1<
                        T,
                    > as _dlpack::__private::TensorFieldsOf<
                        __DlpackMarker,
                    >>::find_tensor_mut(&mut self.0, __rest);
                }
                _ => {}
            }
            _dlpack::__private::None
        }
    }
};
