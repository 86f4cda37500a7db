//! One Lua script call: `EVALSHA` written straight into one command buffer, its keys
//! (given together, so their count is right by construction) and then its arguments, with
//! no string per key or argument (names and JSON are formatted in place), and the script
//! loaded when the server does not know it.

use super::connection::Conn;
use ::redis::{
    Cmd, ErrorKind, FromRedisValue, RedisResult, RedisWrite, Script, ServerErrorKind, ToRedisArgs,
};
use std::fmt;

/// A key of a call given as something to format, when a call's keys are of several kinds.
pub(super) type KeyText<'a> = &'a (dyn fmt::Display + Sync);

/// An `EVALSHA` of one script: its keys when made, then its arguments one by one.
pub(super) struct ScriptCall<'s> {
    script: &'s Script,
    cmd: Cmd,
}

impl<'s> ScriptCall<'s> {
    /// A call of `script` with `keys` (each formatted into the command's buffer) and
    /// about `args` arguments to come.
    pub(super) fn new<K: fmt::Display>(script: &'s Script, keys: &[K], args: usize) -> Self {
        let count = keys.len();
        let mut cmd = Cmd::with_capacity(3 + count + args, 48 * (count + args) + 64);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(count);
        for key in keys {
            cmd.write_arg_fmt(key);
        }
        ScriptCall { script, cmd }
    }

    /// Adds an argument.
    pub(super) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Adds an argument formatted into the command's buffer.
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
