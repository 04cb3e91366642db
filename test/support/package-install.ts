// Installs the npm tarball of this repository into a separate app folder, as a user's `npm install` does, with
// no registry access (test/package.test.ts on MikroORM 6, test/package-v7.test.ts on MikroORM 7).
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { expect, inject, it } from 'vitest';
import { SAGA_MIGRATIONS } from '../../migrations/index.js';
import { adminQuery, withDatabase } from './postgres-server.js';

const run = promisify(execFile);
const root = resolve(import.meta.dirname, '..', '..');

/** Runs npm in `cwd` with the app's own empty cache and user config (see `installPackage`). */
export type AppNpm = (args: string[], cwd: string) => Promise<{ stdout: string; stderr: string }>;

/**
 * npm that sees nothing of this machine: an empty cache and an empty user config of the app's own, instead of
 * ~/.npm and ~/.npmrc. A warm cache once hid that `npm install --offline` needs registry metadata for the
 * package's dependencies (ENOTCACHED for @opentelemetry/api on a fresh machine).
 */
export function appNpm(app: string): AppNpm {
  const env = {
    ...process.env,
    npm_config_cache: join(app, 'npm-cache'),
    npm_config_userconfig: join(app, 'npmrc'),
    npm_config_update_notifier: 'false',
  };
  return (args, cwd) => run('npm', args, { cwd, env });
}

/**
 * Packs each runtime dependency of the package from the repository's node_modules, where the lockfile put
 * the exact version. Installing these tarballs beside the package satisfies its `dependencies` with no
 * registry request, so the test needs neither the network nor a cache, and still installs the real tarball
 * the way a user does: a `dependencies` entry these tarballs do not satisfy (a new dependency, a changed
 * range) makes the offline install fail with ENOTCACHED.
 */
async function packDependencies(npm: AppNpm, app: string): Promise<string[]> {
  const manifest = JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
  const tarballs: string[] = [];
  for (const name of Object.keys(manifest.dependencies ?? {})) {
    const dir = join(root, 'node_modules', name);
    const own = JSON.parse(await readFile(join(dir, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
    // Their own dependencies would need packing too; none has any today, so keep this simple and say so.
    expect(own.dependencies ?? {}, `${name} has dependencies of its own: pack them as well`).toEqual({});
    const { stdout } = await npm(['pack', '--ignore-scripts', '--pack-destination', app, dir], root);
    tarballs.push(`./${stdout.trim().split('\n').pop()}`);
  }
  return tarballs;
}

/**
 * Creates `app` (a private ESM package) and installs the repository's tarball (`npm pack`, which builds it) and
 * its runtime dependencies there, offline. The peers (@mikro-orm/*) are not installed: the app resolves them
 * from the node_modules of a folder above it, one copy of @mikro-orm/core as in a real app.
 */
export async function installPackage(app: string): Promise<AppNpm> {
  const npm = appNpm(app);
  await mkdir(app, { recursive: true });
  await writeFile(join(app, 'npmrc'), '');
  const { stdout } = await npm(['pack', '--pack-destination', app], root);
  const tarball = `./${stdout.trim().split('\n').pop()}`;
  const dependencies = await packDependencies(npm, app);
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'saga-consumer', private: true, type: 'module' }));
  await npm(['install', '--no-save', '--legacy-peer-deps', '--offline', '--no-audit', '--no-fund', tarball, ...dependencies], app);
  return npm;
}

/** Compiles the app with the repository's TypeScript; a type error fails with tsc's output. */
export async function compileApp(app: string): Promise<void> {
  await run(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], { cwd: app }).catch(
    (error: { stdout?: string }) => {
      throw new Error(`the app does not type-check against the package:\n${error.stdout}`);
    },
  );
}

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

  // Regression: with the metadata cache warm (ts-morph's default), the saga table's partial index came
  // back as a plain index.
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
