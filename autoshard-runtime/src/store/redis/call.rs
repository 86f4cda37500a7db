//! One Lua script call: `EVALSHA` written straight into one command buffer, keys first
//! and then arguments, with no string per key or argument (names and JSON are formatted
//! in place), and the script loaded when the server does not know it.

use super::connection::Conn;
use ::redis::{
    Cmd, ErrorKind, FromRedisValue, RedisResult, RedisWrite, Script, ServerErrorKind, ToRedisArgs,
};
use std::fmt;

/// An `EVALSHA` of one script, built argument by argument. The keys (their number is
/// given up front) must be written before the other arguments.
pub(super) struct ScriptCall<'s> {
    script: &'s Script,
    cmd: Cmd,
}

impl<'s> ScriptCall<'s> {
    /// A call of `script` with `keys` keys and about `args` other arguments.
    pub(super) fn new(script: &'s Script, keys: usize, args: usize) -> Self {
        let mut cmd = Cmd::with_capacity(3 + keys + args, 48 * (keys + args) + 64);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        ScriptCall { script, cmd }
    }

    /// Adds a key or an argument.
    pub(super) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Adds a key or an argument: `arg` formatted into the command's buffer.
    pub(super) fn arg_display(&mut self, arg: impl fmt::Display) -> &mut Self {
        self.cmd.write_arg_fmt(arg);
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
