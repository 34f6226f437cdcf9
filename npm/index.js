'use strict';
// sqlite-tde for Node: the bundled tde.so (lib/tde.so) and the calls to
// load it into a better-sqlite3 database (or any object with
// loadExtension(path), such as node:sqlite's DatabaseSync opened with
// allowExtension: true, in Node versions that have it; Node 20 does not).
//
// Loading registers the tde VFS for the whole process.  better-sqlite3
// ignores URI parameters, so set SQLITE_TDE_DEFAULT_VFS=1 and
// SQLITE_TDE_CONFIG=FILE in process.env before load(): tde then becomes the
// default VFS of every database opened afterwards.
const path = require('path');

function loadablePath() {
  return path.join(__dirname, 'lib', 'tde.so');
}

function load(db) {
  if (!db || typeof db.loadExtension !== 'function') {
    throw new TypeError('sqlite-tde: load(db) needs a database with loadExtension() ' +
                        '(better-sqlite3, or node:sqlite with allowExtension: true)');
  }
  db.loadExtension(loadablePath());
}

// Opens the keystore of configuration file `config` (null: the default
// search) for the whole process with `password`, bound as a parameter:
// never part of SQL text, and the extension overwrites SQLite's copy of it
// (a JavaScript string itself cannot be wiped).  Returns 'OPEN'; throws the
// reason (code SQLITE_AUTH for a wrong password).
function openKeystore(db, config, password) {
  const row = db.prepare('SELECT tde_keystore_open(?, ?) AS state').get(config ?? null, password);
  return row.state;
}

module.exports = { load, loadablePath, openKeystore };
