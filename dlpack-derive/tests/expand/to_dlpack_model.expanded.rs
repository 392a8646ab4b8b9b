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
};
