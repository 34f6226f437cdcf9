/** Anything that can load an SQLite extension by path (better-sqlite3's Database). */
export interface ExtensionHost {
  loadExtension(path: string): unknown;
}
/** Path of the bundled tde.so. */
export function loadablePath(): string;
/** Loads tde.so into db: registers the tde VFS for the whole process. */
export function load(db: ExtensionHost): void;
/** Opens a keystore with a password bound as a parameter; returns 'OPEN'. */
export function openKeystore(db: { prepare(sql: string): { get(...args: unknown[]): any } },
                             config: string | null, password: string): string;
