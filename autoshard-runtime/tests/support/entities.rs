// Hand-written `Entity` impls, exactly what `#[autoshard::sharded]` / `#[derive(Entity)]`
// generate, for tests and doc examples of the runtime (which cannot use the macros).
// Plain items only: doc examples `include!` this file.

/// A question whose votes are spread over 10 static shards (sum).
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub id: u64,
    pub text: String,
    pub votes: i64,
    pub __autoshard_shadow_votes: autoshard_runtime::Shadow<i64>,
    pub __autoshard_state: autoshard_runtime::EntityState,
}

impl Question {
    /// A fresh question, as the generated constructor-friendly code allows.
    pub fn new(id: u64, text: &str, votes: i64) -> Self {
        Question {
            id,
            text: text.to_owned(),
            votes,
            __autoshard_shadow_votes: autoshard_runtime::Shadow::new(),
            __autoshard_state: autoshard_runtime::EntityState::new(),
        }
    }

    /// `#[shard_method]`: the body runs on the aggregate and on the shadow.
    pub fn vote_up(&mut self) {
        self.votes += 1;
        let shadow = self.__autoshard_shadow_votes.get().copied().unwrap_or(0);
        self.__autoshard_shadow_votes.set(shadow + 1);
    }

    /// `#[shard_fold]`.
    pub fn fold_votes(a: i64, b: i64) -> i64 {
        a + b
    }
}

fn __autoshard_decode_i64(
    field: &str,
    value: &autoshard_runtime::Value,
) -> Result<i64, autoshard_runtime::FieldError> {
    autoshard_runtime::__private::serde_json::from_value::<i64>(value.clone())
        .map_err(|e| autoshard_runtime::FieldError::new(field, e))
}

fn __autoshard_decode_text(
    doc: &autoshard_runtime::Document,
) -> Result<String, autoshard_runtime::FieldError> {
    let value = doc
        .get("text")
        .ok_or_else(|| autoshard_runtime::FieldError::missing("text"))?;
    autoshard_runtime::__private::serde_json::from_value::<String>(value.clone())
        .map_err(|e| autoshard_runtime::FieldError::new("text", e))
}

impl autoshard_runtime::Entity for Question {
    type Id = u64;
    const KIND: &'static str = "Question";
    const PROPERTIES: &'static [autoshard_runtime::ShardedProperty] =
        &[autoshard_runtime::ShardedProperty {
            name: "votes",
            stored_as: "shard_votes",
            sharding: autoshard_runtime::Sharding::Static { shards: 10 },
        }];

    fn id(&self) -> &u64 {
        &self.id
    }

    fn to_document(&self) -> Result<autoshard_runtime::Document, autoshard_runtime::FieldError> {
        Ok([("text".to_owned(), self.text.clone().into())].into())
    }

    fn from_document(
        id: u64,
        doc: &autoshard_runtime::Document,
    ) -> Result<Self, autoshard_runtime::FieldError> {
        Ok(Question {
            id,
            text: __autoshard_decode_text(doc)?,
            votes: 0,
            __autoshard_shadow_votes: autoshard_runtime::Shadow::new(),
            __autoshard_state: autoshard_runtime::EntityState::new(),
        })
    }

    fn fold_stored(
        &mut self,
        property: usize,
        stored: &autoshard_runtime::Value,
    ) -> Result<(), autoshard_runtime::FieldError> {
        match property {
            0 => {
                let stored = __autoshard_decode_i64("votes", stored)?;
                self.votes = Question::fold_votes(self.votes, stored);
                Ok(())
            }
            _ => Err(autoshard_runtime::__private::no_such_property::<Self>(
                property,
            )),
        }
    }

    fn shadow_touched(&self, property: usize) -> bool {
        property == 0 && self.__autoshard_shadow_votes.is_touched()
    }

    fn shadow_value(
        &self,
        property: usize,
    ) -> Result<autoshard_runtime::Value, autoshard_runtime::FieldError> {
        match property {
            0 => Ok(self
                .__autoshard_shadow_votes
                .get()
                .copied()
                .unwrap_or(0)
                .into()),
            _ => Err(autoshard_runtime::__private::no_such_property::<Self>(
                property,
            )),
        }
    }

    fn fold_shadow_into(
        &self,
        property: usize,
        stored: Option<&autoshard_runtime::Value>,
    ) -> Result<autoshard_runtime::Value, autoshard_runtime::FieldError> {
        match property {
            0 => {
                let stored = match stored {
                    Some(value) => __autoshard_decode_i64("votes", value)?,
                    None => 0,
                };
                let shadow = self.__autoshard_shadow_votes.get().copied().unwrap_or(0);
                Ok(Question::fold_votes(stored, shadow).into())
            }
            _ => Err(autoshard_runtime::__private::no_such_property::<Self>(
                property,
            )),
        }
    }

    fn aggregate_value(
        &self,
        property: usize,
    ) -> Result<autoshard_runtime::Value, autoshard_runtime::FieldError> {
        match property {
            0 => Ok(self.votes.into()),
            _ => Err(autoshard_runtime::__private::no_such_property::<Self>(
                property,
            )),
        }
    }

    fn neutral_value(
        property: usize,
    ) -> Result<autoshard_runtime::Value, autoshard_runtime::FieldError> {
        match property {
            0 => Ok(0.into()),
            _ => Err(autoshard_runtime::__private::no_such_property::<Self>(
                property,
            )),
        }
    }

    fn fold_values(
        property: usize,
        a: &autoshard_runtime::Value,
        b: &autoshard_runtime::Value,
    ) -> Result<autoshard_runtime::Value, autoshard_runtime::FieldError> {
        match property {
            0 => Ok(Question::fold_votes(
                __autoshard_decode_i64("votes", a)?,
                __autoshard_decode_i64("votes", b)?,
            )
            .into()),
            _ => Err(autoshard_runtime::__private::no_such_property::<Self>(
                property,
            )),
        }
    }

    fn reset_shadow(&mut self, property: usize) {
        if property == 0 {
            self.__autoshard_shadow_votes.reset();
        }
    }

    fn state(&self) -> Option<&autoshard_runtime::EntityState> {
        Some(&self.__autoshard_state)
    }

    fn state_mut(&mut self) -> Option<&mut autoshard_runtime::EntityState> {
        Some(&mut self.__autoshard_state)
    }
}

/// The unsharded twin: votes live in the main document (the paper's naive variant).
#[derive(Debug, Clone, PartialEq)]
pub struct NaiveQuestion {
    pub id: u64,
    pub text: String,
    pub votes: i64,
}

impl NaiveQuestion {
    pub fn vote_up(&mut self) {
        self.votes += 1;
    }
}

impl autoshard_runtime::Entity for NaiveQuestion {
    type Id = u64;
    const KIND: &'static str = "NaiveQuestion";

    fn id(&self) -> &u64 {
        &self.id
    }

    fn to_document(&self) -> Result<autoshard_runtime::Document, autoshard_runtime::FieldError> {
        Ok([
            ("text".to_owned(), self.text.clone().into()),
            ("votes".to_owned(), self.votes.into()),
        ]
        .into())
    }

    fn from_document(
        id: u64,
        doc: &autoshard_runtime::Document,
    ) -> Result<Self, autoshard_runtime::FieldError> {
        let votes = doc
            .get("votes")
            .ok_or_else(|| autoshard_runtime::FieldError::missing("votes"))?;
        Ok(NaiveQuestion {
            id,
            text: __autoshard_decode_text(doc)?,
            votes: __autoshard_decode_i64("votes", votes)?,
        })
    }
}

/// A counter whose hits are dynamically sharded (`#[shardable(neutral = 0)]` without
/// `shards`): every save adds a shard document, compaction folds them (sum).
#[derive(Debug, Clone, PartialEq)]
pub struct Counter {
    pub id: u64,
    pub hits: i64,
    pub __autoshard_shadow_hits: autoshard_runtime::Shadow<i64>,
    pub __autoshard_state: autoshard_runtime::EntityState,
}

impl Counter {
    pub fn new(id: u64, hits: i64) -> Self {
        Counter {
            id,
            hits,
            __autoshard_shadow_hits: autoshard_runtime::Shadow::new(),
            __autoshard_state: autoshard_runtime::EntityState::new(),
        }
    }

    /// `#[shard_method]`.
    pub fn hit(&mut self) {
        self.hits += 1;
        let shadow = self.__autoshard_shadow_hits.get().copied().unwrap_or(0);
        self.__autoshard_shadow_hits.set(shadow + 1);
    }
}

impl autoshard_runtime::Entity for Counter {
    type Id = u64;
    const KIND: &'static str = "Counter";
    const PROPERTIES: &'static [autoshard_runtime::ShardedProperty] =
        &[autoshard_runtime::ShardedProperty {
            name: "hits",
            stored_as: "shard_hits",
            sharding: autoshard_runtime::Sharding::Dynamic,
        }];

    fn id(&self) -> &u64 {
        &self.id
    }

    fn to_document(&self) -> Result<autoshard_runtime::Document, autoshard_runtime::FieldError> {
        Ok(autoshard_runtime::Document::new())
    }

    fn from_document(
        id: u64,
        _doc: &autoshard_runtime::Document,
    ) -> Result<Self, autoshard_runtime::FieldError> {
        Ok(Counter::new(id, 0))
    }

    fn fold_stored(
        &mut self,
        property: usize,
        stored: &autoshard_runtime::Value,
    ) -> Result<(), autoshard_runtime::FieldError> {
        match property {
            0 => {
                self.hits += __autoshard_decode_i64("hits", stored)?;
                Ok(())
            }
            _ => Err(autoshard_runtime::__private::no_such_property::<Self>(
                property,
            )),
        }
    }

    fn shadow_touched(&self, property: usize) -> bool {
        property == 0 && self.__autoshard_shadow_hits.is_touched()
    }

    fn shadow_value(
        &self,
        property: usize,
    ) -> Result<autoshard_runtime::Value, autoshard_runtime::FieldError> {
        match property {
            0 => Ok(self
                .__autoshard_shadow_hits
                .get()
                .copied()
                .unwrap_or(0)
                .into()),
            _ => Err(autoshard_runtime::__private::no_such_property::<Self>(
                property,
            )),
        }
    }

    fn fold_shadow_into(
        &self,
        property: usize,
        stored: Option<&autoshard_runtime::Value>,
    ) -> Result<autoshard_runtime::Value, autoshard_runtime::FieldError> {
        match property {
            0 => {
                let stored = match stored {
                    Some(value) => __autoshard_decode_i64("hits", value)?,
                    None => 0,
                };
                Ok((stored + self.__autoshard_shadow_hits.get().copied().unwrap_or(0)).into())
            }
            _ => Err(autoshard_runtime::__private::no_such_property::<Self>(
                property,
            )),
        }
    }

    fn aggregate_value(
        &self,
        property: usize,
    ) -> Result<autoshard_runtime::Value, autoshard_runtime::FieldError> {
        match property {
            0 => Ok(self.hits.into()),
            _ => Err(autoshard_runtime::__private::no_such_property::<Self>(
                property,
            )),
        }
    }

    fn neutral_value(
        property: usize,
    ) -> Result<autoshard_runtime::Value, autoshard_runtime::FieldError> {
        match property {
            0 => Ok(0.into()),
            _ => Err(autoshard_runtime::__private::no_such_property::<Self>(
                property,
            )),
        }
    }

    fn fold_values(
        property: usize,
        a: &autoshard_runtime::Value,
        b: &autoshard_runtime::Value,
    ) -> Result<autoshard_runtime::Value, autoshard_runtime::FieldError> {
        match property {
            0 => Ok(
                (__autoshard_decode_i64("hits", a)? + __autoshard_decode_i64("hits", b)?).into(),
            ),
            _ => Err(autoshard_runtime::__private::no_such_property::<Self>(
                property,
            )),
        }
    }

    fn reset_shadow(&mut self, property: usize) {
        if property == 0 {
            self.__autoshard_shadow_hits.reset();
        }
    }

    fn state(&self) -> Option<&autoshard_runtime::EntityState> {
        Some(&self.__autoshard_state)
    }

    fn state_mut(&mut self) -> Option<&mut autoshard_runtime::EntityState> {
        Some(&mut self.__autoshard_state)
    }
}
