//! The annotation macros' pass cases (`tests/pass/`, one folder per macro): entities
//! declared as applications declare them, each file a module of this test whose `main`
//! runs as a test of its own. They build with the workspace's own dependencies; the
//! compile-fail cases, which need a compiler's output, are `compiletest.rs`'s.

/// One test per pass case: `name => "path"` includes the file as module `name` and runs
/// its `main`.
macro_rules! pass {
    ($($name:ident => $path:literal,)*) => {
        $(
            #[path = $path]
            #[allow(dead_code, unreachable_pub, clippy::all, clippy::pedantic)]
            mod $name;

            #[test]
            fn $name() {
                $name::main();
            }
        )*
    };
}

pass! {
    entity_group => "pass/entity/group.rs",
    entity_group_hygiene => "pass/entity/group-hygiene.rs",
    entity_unsharded => "pass/entity/unsharded.rs",
    mapper_id_forms => "pass/mapper/id-forms.rs",
    sharded_builtin_folds => "pass/sharded/builtin-folds.rs",
    sharded_hygiene => "pass/sharded/hygiene.rs",
    sharded_method_forms => "pass/sharded/method-forms.rs",
    sharded_method_in_trait_impl => "pass/sharded/method-in-trait-impl.rs",
    sharded_several_fields => "pass/sharded/several-fields.rs",
    sharded_shard_bounds => "pass/sharded/shard-bounds.rs",
}
