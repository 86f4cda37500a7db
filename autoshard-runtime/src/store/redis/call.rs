//! One Lua script call: `EVALSHA` written straight into one command buffer, its keys
//! (given together, so their count is right by construction) and then its arguments, with
//! no string per key or argument (names are written through one scratch buffer), and the
//! script loaded when the server does not know it.
//!
//! Names and arguments are written as [`Text`], not formatted: the formatting machinery
//! costs several times the copying, and a merge writes two names and five arguments.

use super::connection::Conn;
use super::names::Text;
use ::redis::{
    Cmd, ErrorKind, FromRedisValue, RedisResult, RedisWrite, Script, ServerErrorKind, ToRedisArgs,
};
use std::fmt;

/// A key of a call, when a call's keys are of several kinds.
pub(super) type KeyText<'a> = &'a dyn Text;

/// An `EVALSHA` of one script: its keys when made, then its arguments one by one.
pub(super) struct ScriptCall<'s> {
    script: &'s Script,
    cmd: Cmd,
    /// Where a name or an argument is written before it is copied into the command.
    scratch: String,
}

impl<'s> ScriptCall<'s> {
    /// A call of `script` with `keys` (each written into the command's buffer) and
    /// about `args` arguments to come.
    pub(super) fn new<K: Text>(script: &'s Script, keys: &[K], args: usize) -> Self {
        let count = keys.len();
        let mut cmd = Cmd::with_capacity(3 + count + args, 48 * (count + args) + 64);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(count);
        let mut call = ScriptCall {
            script,
            cmd,
            scratch: String::with_capacity(96),
        };
        for key in keys {
            call.arg_with(|out| key.push_to(out));
        }
        call
    }

    /// Adds an argument.
    pub(super) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Adds an argument formatted into the command's buffer (for arguments of the rare
    /// paths: [`ScriptCall::arg_with`] costs less).
    pub(super) fn arg_display(&mut self, arg: impl fmt::Display) -> &mut Self {
        self.cmd.write_arg_fmt(arg);
        self
    }

    /// Adds an argument that `write` appends to an empty text.
    pub(super) fn arg_with(&mut self, write: impl FnOnce(&mut String)) -> &mut Self {
        self.scratch.clear();
        write(&mut self.scratch);
        self.cmd.write_arg(self.scratch.as_bytes());
        self
    }

    /// The command, for a pipeline.
    pub(super) fn cmd(&self) -> &Cmd {
        &self.cmd
    }

    /// Loads the script into the server of `conn`.
    pub(super) async fn load(&self, conn: &mut Conn) -> RedisResult<()> {
        self.script.load_async(conn).await.map(drop)
    }

    /// Runs the call on `conn`; a server that does not know the script ran nothing, so it
    /// is loaded and the call sent again.
    pub(super) async fn run<T: FromRedisValue>(&self, conn: &mut Conn) -> RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.load(conn).await?;
                self.cmd.query_async(conn).await
            }
            answer => answer,
        }
    }
}
