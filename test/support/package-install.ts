// Installs the npm tarball of this repository into a separate app folder, as a user's `npm install` does, with
// no registry access (test/packaging/package.test.ts on MikroORM 6, test/packaging/package-v7.test.ts on MikroORM 7).
import { randomUUID } from 'node:crypto';
import { expect, inject, it } from 'vitest';
import { SAGA_MIGRATIONS } from '../../migrations/index.js';
import { buildApp, installPackedPackage, run } from './packed-package.js';
import { adminQuery, withDatabase } from './postgres-server.js';

/** Installs this run's packed tarball into an app folder, offline (see `installPackedPackage`). */
export { buildApp as compileApp, installPackedPackage as installPackage };

/** Runs the compiled app (`dist/app.js <args>`) and returns the JSON it prints last. */
export type AppRunner = (...args: string[]) => Promise<Record<string, unknown>>;

/** `env`: the app process's environment (default: this process's). */
export function appRunner(app: string, env: NodeJS.ProcessEnv = process.env): AppRunner {
  return async (...args) => {
    const { stdout } = await run(process.execPath, ['dist/app.js', ...args], { cwd: app, env });
    return JSON.parse(stdout.trim().split('\n').pop()!);
  };
}

/** Runs `use` on a new PostgreSQL database of its own (a connection URL) and drops it afterwards. */
export async function withPostgresDatabase<T>(use: (url: string) => Promise<T>): Promise<T> {
  const server = inject('postgresUrl');
  const name = `saga_pkg_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  await adminQuery(server, `create database "${name}"`);
  try {
    return await use(withDatabase(server, name));
  } finally {
    await adminQuery(server, `drop database if exists "${name}" with (force)`);
  }
}

/**
 * The tests every package app passes, whatever its MikroORM major: `app.js <dialect> <provider> <location>
 * [list|folder]` works with the major's default metadata provider (`defaultProvider`) and with ts-morph, with
 * the library's migrations alone or in the app's own migrations folder, on SQLite and PostgreSQL.
 */
export function itWorksInTheApp(runApp: AppRunner, expectWorks: (result: Record<string, unknown>) => void, defaultProvider: string): void {
  it('works on SQLite with the default metadata provider', async () => {
    expectWorks(await runApp('sqlite', defaultProvider, 'default.sqlite'));
  });

  // With the metadata cache warm (ts-morph's default), the saga table's partial index must stay partial.
  it('works on SQLite with the ts-morph metadata provider, its metadata cache cold and then warm', async () => {
    const cold = await runApp('sqlite', 'ts-morph', 'morph-cold.sqlite');
    expectWorks(cold);
    expect(cold.cachedEntities).toBe(0);
    const warm = await runApp('sqlite', 'ts-morph', 'morph-warm.sqlite');
    expectWorks(warm);
    expect(warm.cachedEntities).toBeGreaterThan(0);
  });

  it("runs the library's migrations from the app's own migrations folder, beside the app's migration (SQLite)", async () => {
    const result = await runApp('sqlite', defaultProvider, 'folder.sqlite', 'folder');
    expectWorks(result);
    expect(result.executed).toEqual(['Migration20200101000000', ...SAGA_MIGRATIONS.sqlite.map((m) => m.name)]);
    expect(result.appNotes).toBe(0);
  });

  it("works on PostgreSQL, the library's migrations in the app's migrations folder", async () => {
    const result = await withPostgresDatabase((url) => runApp('postgresql', defaultProvider, url, 'folder'));
    expectWorks(result);
    expect(result.executed).toEqual(['Migration20200101000000', ...SAGA_MIGRATIONS.postgresql.map((m) => m.name)]);
    expect(result.appNotes).toBe(0);
  });
}
