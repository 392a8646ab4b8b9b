#[doc(hidden)]
const _: () = {
    use ::dlpack_core as _dlpack;
    #[automatically_derived]
    #[allow(unused_qualifications)]
    impl _dlpack::__private::FromDLPack for Attention {
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
                    <Linear as _dlpack::__private::FromDLPack>::from_dlpack_in(
                        &_dlpack::__private::join_name(__prefix, "q_proj"),
                        __batch,
                    ),
                );
            let __field1 = __problems
                .field(
                    <Array2<
                        f32,
                    > as _dlpack::__private::FromDLPack>::from_dlpack_in(
                        &_dlpack::__private::join_name(__prefix, "out"),
                        __batch,
                    ),
                );
            let __field2 = __problems
                .field(
                    module::from_dlpack_in(
                        &_dlpack::__private::join_name(__prefix, "rotary"),
                        __batch,
                    ),
                );
            let __field3 = __problems
                .field(
                    <Array1<
                        f32,
                    > as _dlpack::__private::FromDLPack>::from_dlpack_in(
                        &_dlpack::__private::join_name(__prefix, "norm"),
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
                q_proj: __field0,
                o_proj: __field1,
                rotary: __field2,
                norm: __field3,
            })
        }
        fn select_in(
            __prefix: &str,
            __selection: &mut _dlpack::__private::Selection<'_>,
        ) {
            __selection
                .split_along(
                    0usize,
                    |__selection| {
                        <Linear as _dlpack::__private::FromDLPack>::select_in(
                            &_dlpack::__private::join_name(__prefix, "q_proj"),
                            __selection,
                        );
                    },
                );
            __selection
                .split_along(
                    1usize,
                    |__selection| {
                        <Array2<
                            f32,
                        > as _dlpack::__private::FromDLPack>::select_in(
                            &_dlpack::__private::join_name(__prefix, "out"),
                            __selection,
                        );
                    },
                );
            __selection
                .split_along(
                    0usize,
                    |__selection| {
                        __selection
                            .take_under(
                                &_dlpack::__private::join_name(__prefix, "rotary"),
                            );
                    },
                );
            <Array1<
                f32,
            > as _dlpack::__private::FromDLPack>::select_in(
                &_dlpack::__private::join_name(__prefix, "norm"),
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
                    <Linear as _dlpack::__private::FromDLPack>::load_dlpack_in(
                        &mut self.q_proj,
                        &_dlpack::__private::join_name(__prefix, "q_proj"),
                        __batch,
                        __report,
                    ),
                );
            __problems
                .check(
                    <Array2<
                        f32,
                    > as _dlpack::__private::FromDLPack>::load_dlpack_in(
                        &mut self.o_proj,
                        &_dlpack::__private::join_name(__prefix, "out"),
                        __batch,
                        __report,
                    ),
                );
            __problems
                .check(
                    _dlpack::__private::load_with_module(
                        &mut self.rotary,
                        &_dlpack::__private::join_name(__prefix, "rotary"),
                        __batch,
                        __report,
                        module::from_dlpack_in,
                    ),
                );
            __problems
                .check(
                    <Array1<
                        f32,
                    > as _dlpack::__private::FromDLPack>::load_dlpack_in(
                        &mut self.norm,
                        &_dlpack::__private::join_name(__prefix, "norm"),
                        __batch,
                        __report,
                    ),
                );
            __problems.finish()
        }
    }
};
