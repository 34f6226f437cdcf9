"""sqlite-tde for Python: the bundled tde.so and the two calls to load it.

    import sqlite3, sqlite_tde
    boot = sqlite3.connect(":memory:")
    sqlite_tde.load(boot)        # registers the tde VFS for the whole process
    db = sqlite3.connect("file:app.db?vfs=tde&tde_config=tde.conf", uri=True)

open_keystore() opens a keystore whose configuration names no password
source.  The password reaches the extension through a pipe
(tde_keystore_open_fd): it never appears in SQL text and never becomes an
SQLite value.  What this module cannot wipe is the caller's own str or
bytes object; pass a bytearray and it is overwritten after the call.
"""
import getpass
import os
import sqlite3

__all__ = ["load", "loadable_path", "open_keystore", "__version__"]
__version__ = "0.1.0"

_HERE = os.path.dirname(os.path.abspath(__file__))


def loadable_path():
    """The path of the bundled SQLite extension (tde.so), for hosts that
    load extensions by path themselves (sqlite3_load_extension, .load)."""
    return os.path.join(_HERE, "tde.so")


def load(conn):
    """Load tde.so into the sqlite3 connection conn: extension loading is
    switched on for the call and off again afterwards.  The tde VFS is then
    registered process-wide; open encrypted databases with a URI naming
    vfs=tde (and tde_config=FILE, or $SQLITE_TDE_CONFIG)."""
    if not hasattr(conn, "enable_load_extension"):
        raise RuntimeError(
            "this Python's sqlite3 module cannot load extensions (built without "
            "--enable-loadable-sqlite-extensions); use /usr/bin/python3 or a venv made from it")
    conn.enable_load_extension(True)
    try:
        conn.load_extension(loadable_path())
    finally:
        conn.enable_load_extension(False)


def open_keystore(conn, config=None, password=None, prompt="Wallet password: "):
    """Open the keystore of configuration file config (None: the default
    search, $SQLITE_TDE_CONFIG then /etc/sqlite-tde/tde.conf) for the whole
    process, with password (str, bytes or bytearray; None: asked for
    without echo).  conn is a connection on which load() ran.  Returns
    'OPEN'; raises sqlite3.DatabaseError naming the reason (for a wrong
    password: "tde_keystore_open_fd: wallet FILE: password incorrect").

    The password is written to a pipe that the extension reads straight
    into locked memory; a bytearray password is overwritten afterwards."""
    if password is None:
        password = getpass.getpass(prompt)
    if isinstance(password, str):
        secret = bytearray(password.encode("utf-8"))
    else:
        secret = bytearray(password)
    try:
        rfd, wfd = os.pipe()
        try:
            try:
                view = memoryview(secret)
                while view:
                    view = view[os.write(wfd, view):]
                view.release()
            finally:
                os.close(wfd)
            row = conn.execute("SELECT tde_keystore_open_fd(?, ?)", (config, rfd)).fetchone()
        finally:
            os.close(rfd)
    finally:
        secret[:] = bytes(len(secret))
        if isinstance(password, bytearray):
            password[:] = bytes(len(password))
    return row[0]
