// Installs the npm tarball of this repository into a separate app folder, as a user's `npm install` does, with
// no registry access (test/package.test.ts on MikroORM 6, test/package-v7.test.ts on MikroORM 7).
import { execFile } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'vitest';

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
