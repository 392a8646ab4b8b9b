#[doc(hidden)]
const _: () = {
    use ::dlpack_core as _dlpack;
    #[automatically_derived]
    #[allow(unused_qualifications)]
    impl<'a, T: Element, D> _dlpack::__private::ToDLPack for Model<'a, T, D>
    where
        D: Dimension,
        Array<T, D>: _dlpack::__private::ToDLPack,
        Option<Array1<T>>: _dlpack::__private::ToDLPack,
        Vec<Layer<T>>: _dlpack::__private::ToDLPack,
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
            <Array<
                T,
                D,
            > as _dlpack::__private::ToDLPack>::to_dlpack_into(
                self.weight,
                &_dlpack::__private::join_name(__prefix, "weight"),
                __batch,
            )?;
            <Option<
                Array1<T>,
            > as _dlpack::__private::ToDLPack>::to_dlpack_into(
                self.bias,
                &_dlpack::__private::join_name(__prefix, "b"),
                __batch,
            )?;
            <Head as _dlpack::__private::ToDLPack>::to_dlpack_into(
                self.head,
                __prefix,
                __batch,
            )?;
            <Vec<
                Layer<T>,
            > as _dlpack::__private::ToDLPack>::to_dlpack_into(
                self.layers,
                &_dlpack::__private::join_name(__prefix, "layers"),
                __batch,
            )?;
            _dlpack::__private::Ok(())
        }
    }
    #[automatically_derived]
    #[allow(unused_qualifications)]
    impl<
        'a,
        T: Element,
        D,
        __DlpackMarker: ?::core::marker::Sized,
    > _dlpack::__private::TensorFieldsOf<__DlpackMarker> for Model<'a, T, D>
    where
        D: Dimension,
        Array<T, D>: _dlpack::__private::TensorFieldsOf<__DlpackMarker>,
        Option<Array1<T>>: _dlpack::__private::TensorFieldsOf<__DlpackMarker>,
        Head: _dlpack::__private::TensorFieldsOf<__DlpackMarker>,
        Vec<Layer<T>>: _dlpack::__private::TensorFieldsOf<__DlpackMarker>,
    {
        fn visit_tensors(
            &self,
            __name: &mut _dlpack::__private::String,
            __visit: &mut dyn ::core::ops::FnMut(
                &str,
                &dyn _dlpack::__private::TensorField,
            ),
        ) {
            let __len = _dlpack::__private::push_segment(__name, "weight");
            <Array<
                T,
                D,
            > as _dlpack::__private::TensorFieldsOf<
                __DlpackMarker,
            >>::visit_tensors(&self.weight, __name, __visit);
            __name.truncate(__len);
            let __len = _dlpack::__private::push_segment(__name, "b");
            <Option<
                Array1<T>,
            > as _dlpack::__private::TensorFieldsOf<
                __DlpackMarker,
            >>::visit_tensors(&self.bias, __name, __visit);
            __name.truncate(__len);
            <Head as _dlpack::__private::TensorFieldsOf<
                __DlpackMarker,
            >>::visit_tensors(&self.head, __name, __visit);
            let __len = _dlpack::__private::push_segment(__name, "layers");
            <Vec<
                Layer<T>,
            > as _dlpack::__private::TensorFieldsOf<
                __DlpackMarker,
            >>::visit_tensors(&self.layers, __name, __visit);
            __name.truncate(__len);
        }
        fn find_tensor(&self, __path: &str) -> _dlpack::__private::Found<'_> {
            if __path.is_empty() {
                return _dlpack::__private::Found::Group;
            }
            let (__head, __rest) = _dlpack::__private::split_path(__path);
            match __head {
                "weight" => {
                    return <Array<
                        T,
                        D,
                    > as _dlpack::__private::TensorFieldsOf<
                        __DlpackMarker,
                    >>::find_tensor(&self.weight, __rest);
                }
                "b" => {
                    return <Option<
                        Array1<T>,
                    > as _dlpack::__private::TensorFieldsOf<
                        __DlpackMarker,
                    >>::find_tensor(&self.bias, __rest);
                }
                "layers" => {
                    return <Vec<
                        Layer<T>,
                    > as _dlpack::__private::TensorFieldsOf<
                        __DlpackMarker,
                    >>::find_tensor(&self.layers, __rest);
                }
                _ => {}
            }
            match <Head as _dlpack::__private::TensorFieldsOf<
                __DlpackMarker,
            >>::find_tensor(&self.head, __path) {
                _dlpack::__private::Found::Nothing => {}
                __found => return __found,
            }
            _dlpack::__private::Found::Nothing
        }
        fn field_names() -> &'static [&'static str] {
            &["weight", "b", "layers"]
        }
        fn find_tensor_mut(
            &mut self,
            __path: &str,
        ) -> _dlpack::__private::Option<&mut dyn _dlpack::__private::TensorField> {
            let (__head, __rest) = _dlpack::__private::split_path(__path);
            match __head {
                "weight" => {
                    return <Array<
                        T,
                        D,
                    > as _dlpack::__private::TensorFieldsOf<
                        __DlpackMarker,
                    >>::find_tensor_mut(&mut self.weight, __rest);
                }
                "b" => {
                    return <Option<
                        Array1<T>,
                    > as _dlpack::__private::TensorFieldsOf<
                        __DlpackMarker,
                    >>::find_tensor_mut(&mut self.bias, __rest);
                }
                "layers" => {
                    return <Vec<
                        Layer<T>,
                    > as _dlpack::__private::TensorFieldsOf<
                        __DlpackMarker,
                    >>::find_tensor_mut(&mut self.layers, __rest);
                }
                _ => {}
            }
            if let _dlpack::__private::Some(__found) = <Head as _dlpack::__private::TensorFieldsOf<
                __DlpackMarker,
            >>::find_tensor_mut(&mut self.head, __path) {
                return _dlpack::__private::Some(__found);
            }
            _dlpack::__private::None
        }
    }
};
