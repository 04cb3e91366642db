// Packs the package the way a user receives it and installs the tarball into an app folder offline, for
// test/packaging/package.test.ts and test/packaging/existing-app.test.ts.
import { execFile } from 'node:child_process';
import { cp, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from './repository.js';

export const run = promisify(execFile);

/**
 * npm for one app folder. npm sees nothing of this machine: an empty cache and an empty user config of the
 * app's own, instead of ~/.npm and ~/.npmrc. A warm cache once hid that `npm install --offline` needs registry
 * metadata for the package's dependencies (ENOTCACHED for @opentelemetry/api on a fresh machine).
 */
export function npmIn(app: string): (args: string[], cwd?: string) => Promise<{ stdout: string }> {
  const env = {
    ...process.env,
    npm_config_cache: join(app, 'npm-cache'),
    npm_config_userconfig: join(app, 'npmrc'),
    npm_config_update_notifier: 'false',
  };
  return (args, cwd = app) => run('npm', args, { cwd, env });
}

/**
 * Builds the package into a staging folder of `app` and packs it from there: the files a user receives
 * (package.json `files`), built by the same `tsc -p tsconfig.build.json` as `prepack`, without touching the
 * repository's own dist/ (two test files packing at once would otherwise delete each other's build).
 */
async function packPackage(app: string): Promise<string> {
  const stage = join(app, '.stage');
  await run(
    process.execPath,
    [join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json', '--outDir', join(stage, 'dist')],
    {
      cwd: REPO_ROOT,
    },
  );
  for (const file of ['package.json', 'README.md', 'docs']) await cp(join(REPO_ROOT, file), join(stage, file), { recursive: true });
  const { stdout } = await npmIn(app)(['pack', '--ignore-scripts', '--pack-destination', app], stage);
  return `./${stdout.trim().split('\n').pop()}`;
}

/**
 * Packs each runtime dependency of the package from the repository's node_modules, where the lockfile put
 * the exact version. Installing these tarballs beside the package satisfies its `dependencies` with no
 * registry request, so the test needs neither the network nor a cache, and still installs the real tarball
 * the way a user does: a `dependencies` entry these tarballs do not satisfy (a new dependency, a changed
 * range) makes the offline install fail with ENOTCACHED.
 */
async function packDependencies(app: string): Promise<string[]> {
  const manifest = JSON.parse(await readFile(join(REPO_ROOT, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
  const tarballs: string[] = [];
  for (const name of Object.keys(manifest.dependencies ?? {})) {
    const dir = join(REPO_ROOT, 'node_modules', name);
    const own = JSON.parse(await readFile(join(dir, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
    // Their own dependencies would need packing too; none has any today, so keep this simple and say so.
    if (Object.keys(own.dependencies ?? {}).length > 0) throw new Error(`${name} has dependencies of its own: pack them as well`);
    const { stdout } = await npmIn(app)(['pack', '--ignore-scripts', '--pack-destination', app, dir], REPO_ROOT);
    tarballs.push(`./${stdout.trim().split('\n').pop()}`);
  }
  return tarballs;
}

/**
 * Creates `app` (inside the repository, so the app resolves the peer dependencies, @mikro-orm/*, from the
 * repository's node_modules: one copy of @mikro-orm/core, as in a real app) and installs the packed package
 * and its dependencies there, offline. The app's own files are copied in afterwards by the caller.
 */
export async function installPackedPackage(app: string): Promise<void> {
  await mkdir(app, { recursive: true });
  await writeFile(join(app, 'npmrc'), '');
  const tarball = await packPackage(app);
  const dependencies = await packDependencies(app);
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'saga-consumer', private: true, type: 'module' }));
  await npmIn(app)(['install', '--no-save', '--legacy-peer-deps', '--offline', '--no-audit', '--no-fund', tarball, ...dependencies]);
}

/** Type-checks and builds the app in `app` with its tsconfig.json; a type error fails with tsc's output. */
export async function buildApp(app: string): Promise<void> {
  await run(process.execPath, [join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], { cwd: app }).catch(
    (error: { stdout?: string }) => {
      throw new Error(`the app does not type-check against the package:\n${error.stdout}`);
    },
  );
}
