//! Rules across fields and attributes of one entity, checked on the model before
//! expansion: exactly one `#[id]`, `#[shardable]` only under `#[autoshard::sharded]`, a
//! neutral value for every sharded field. Nothing is generated here.

use crate::ast::Entity;
use crate::ctxt::Ctxt;

pub fn check(cx: &mut Ctxt, entity: &Entity) {
    check_generics(cx, entity);
    check_id(cx, entity);
    check_sharded(cx, entity);
    crate::group::check(cx, entity);
}

fn check_generics(cx: &mut Ctxt, entity: &Entity) {
    let generics = &entity.input.generics;
    if !generics.params.is_empty() || generics.where_clause.is_some() {
        cx.error_spanned_by(
            generics,
            "`#[derive(Entity)]` does not support generic structs; \
             give the entity concrete field types",
        );
    }
}

fn check_id(cx: &mut Ctxt, entity: &Entity) {
    let mut ids = entity.fields.iter().filter(|f| f.id.is_some());
    let Some(first) = ids.next() else {
        cx.error_spanned_by(
            entity.ident,
            format_args!(
                "`{}` has no `#[id]` field; mark the field that identifies an entity with `#[id]` \
                 (an integer, `String` or `uuid::Uuid`)",
                entity.ident
            ),
        );
        return;
    };
    for extra in ids {
        cx.error_spanned_by(
            extra.id,
            format_args!(
                "duplicate `#[id]`: `{}` is already the id of `{}`; an entity has exactly one \
                 `#[id]` field",
                first.ident, entity.ident
            ),
        );
    }
    for field in &entity.fields {
        if let (Some(_), Some(shardable)) = (field.id, &field.shardable) {
            cx.error_spanned_by(
                shardable.attr,
                "the `#[id]` field cannot be `#[shardable]`: shards are found by the id",
            );
        }
    }
}

fn check_sharded(cx: &mut Ctxt, entity: &Entity) {
    if entity.sharded.is_none() {
        if let Some((_, shardable)) = entity.sharded_fields().next() {
            cx.error_spanned_by(
                shardable.attr,
                format_args!(
                    "`#[shardable]` fields need `#[autoshard::sharded]` on the struct: \
                     add `#[autoshard::sharded]` above `#[derive(Entity)]` on `{}`, \
                     it adds the fields that hold each property's unsaved shard value",
                    entity.ident
                ),
            );
        }
        return;
    }
    for (field, shardable) in entity.sharded_fields() {
        if shardable.neutral.is_none() {
            cx.error_spanned_by(
                shardable.attr,
                format_args!(
                    "`#[shardable]` needs `neutral = ...`: the value of `{}` that its fold \
                     leaves unchanged, e.g. `neutral = 0` for a sum",
                    field.ident
                ),
            );
        }
    }
}
