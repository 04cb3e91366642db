// Packs the package the way a user receives it and installs the tarball into app folders offline, once per test
// run (the folders under .tmp named by global-setup.ts), for test/packaging/*.test.ts and test/cli/typescript-app.test.ts.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cp, mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { promisify } from 'node:util';
import { inject } from 'vitest';
import { buildOnce } from './build-once.js';
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

/** Every file under `path` (a file or a folder), sorted. */
async function filesUnder(path: string): Promise<string[]> {
  if (!(await stat(path)).isDirectory()) return [path];
  const names = await readdir(path, { recursive: true, withFileTypes: true });
  return names
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name))
    .sort();
}

/** The runtime dependencies of the package (package.json `dependencies`), as installed in node_modules. */
async function runtimeDependencies(): Promise<string[]> {
  const manifest = JSON.parse(await readFile(join(REPO_ROOT, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
  return Object.keys(manifest.dependencies ?? {}).map((name) => join(REPO_ROOT, 'node_modules', name));
}

/**
 * A hash of everything the tarballs are made of: the sources tsc compiles, its configs and version, the files
 * packed beside them, the dependencies' manifests and this file. An edit (say during a watch run) names a new build.
 */
/** The files of package.json `files` packed as they are in the repository (the rest is dist/, built). */
const PACKED_AS_IS = ['README.md', 'CHANGELOG.md', 'LICENSE', 'docs'];

async function packageInputsHash(): Promise<string> {
  const inputs = [
    'package.json',
    ...PACKED_AS_IS,
    'src',
    'migrations',
    'tsconfig.json',
    'tsconfig.build.json',
    join('node_modules', 'typescript', 'package.json'),
  ].map((path) => join(REPO_ROOT, path));
  for (const dir of await runtimeDependencies()) inputs.push(join(dir, 'package.json'));
  inputs.push(import.meta.filename);
  const hash = createHash('sha256');
  for (const input of inputs) {
    for (const file of await filesUnder(input)) hash.update(`${relative(REPO_ROOT, file)}\0`).update(await readFile(file));
  }
  return hash.digest('hex').slice(0, 16);
}

/** packed.json: the package's tarball and one tarball per runtime dependency, by file name. */
interface PackedPackage {
  readonly tarball: string;
  readonly dependencies: readonly string[];
}

/**
 * Builds the package into a staging folder and packs it from there: the files a user receives (package.json
 * `files`), built by the same `tsc -p tsconfig.build.json` as `prepack`, without touching the repository's own
 * dist/ (a test packing while another reads dist/ would otherwise see it deleted).
 *
 * Packs each runtime dependency too, from the repository's node_modules, where the lockfile put the exact
 * version. Installing these tarballs beside the package satisfies its `dependencies` with no registry request,
 * so the install needs neither the network nor a cache, and still installs the real tarball the way a user
 * does: a `dependencies` entry these tarballs do not satisfy (a new dependency, a changed range) makes the
 * offline install fail with ENOTCACHED.
 */
async function packInto(into: string): Promise<void> {
  const stage = join(into, 'stage');
  const tsc = join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  await run(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', join(stage, 'dist')], { cwd: REPO_ROOT });
  for (const file of ['package.json', ...PACKED_AS_IS]) await cp(join(REPO_ROOT, file), join(stage, file), { recursive: true });
  await writeFile(join(into, 'npmrc'), '');
  const npm = npmIn(into);
  const pack = async (cwd: string, ...what: string[]) => {
    const { stdout } = await npm(['pack', '--ignore-scripts', '--pack-destination', into, ...what], cwd);
    return stdout.trim().split('\n').pop()!;
  };
  const tarball = await pack(stage);
  const dependencies: string[] = [];
  for (const dir of await runtimeDependencies()) {
    const own = JSON.parse(await readFile(join(dir, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
    // Their own dependencies would need packing too; none has any today, so keep this simple and say so.
    if (Object.keys(own.dependencies ?? {}).length > 0) throw new Error(`${dir} has dependencies of its own: pack them as well`);
    dependencies.push(await pack(REPO_ROOT, dir));
  }
  await writeFile(join(into, 'packed.json'), JSON.stringify({ tarball, dependencies }));
  await rm(stage, { recursive: true });
  await rm(join(into, 'npm-cache'), { recursive: true, force: true });
}

const built = new Map<string, Promise<string>>();

/** `buildOnce` for this process too: a second call while the first is under way waits for it. */
function sharedFolder(dir: string, build: (into: string) => Promise<void>): Promise<string> {
  let folder = built.get(dir);
  if (!folder) {
    folder = buildOnce(dir, build);
    built.set(dir, folder);
    folder.catch(() => built.delete(dir));
  }
  return folder;
}

/** The package packed once per test run (and again after an edit to what goes into it); see `packInto`. */
async function packedPackage(): Promise<{ hash: string; tarballs: string[] }> {
  const hash = await packageInputsHash();
  const dir = await sharedFolder(join(REPO_ROOT, '.tmp', inject('packagingRunFolder'), `tarball-${hash}`), packInto);
  const { tarball, dependencies } = JSON.parse(await readFile(join(dir, 'packed.json'), 'utf8')) as PackedPackage;
  return { hash, tarballs: [tarball, ...dependencies].map((file) => join(dir, file)) };
}

/** The package.json of an app that installs the package. */
const APP_MANIFEST = JSON.stringify({ name: 'saga-consumer', private: true, type: 'module' });

/**
 * Installs the packed package and its dependencies into `app`, offline, with an empty npm cache. `app` is a folder
 * in a .tmp folder of the repository or of the MikroORM 7 leg, so that it resolves the peer dependencies,
 * @mikro-orm/*, from their node_modules: one copy of @mikro-orm/core, as in a real app.
 *
 * npm runs once per run in each such .tmp folder, in a folder of the run there (so it resolves the same peer
 * dependencies); each app gets a copy of the node_modules it installed. The caller copies the app's own files in.
 */
export async function installPackedPackage(app: string): Promise<void> {
  const { hash, tarballs } = await packedPackage();
  const installed = await sharedFolder(join(dirname(app), inject('packagingRunFolder'), `installed-${hash}`), async (into) => {
    await writeFile(join(into, 'npmrc'), '');
    await writeFile(join(into, 'package.json'), APP_MANIFEST);
    await npmIn(into)(['install', '--no-save', '--legacy-peer-deps', '--offline', '--no-audit', '--no-fund', ...tarballs]);
    await rm(join(into, 'npm-cache'), { recursive: true, force: true });
  });
  await mkdir(app, { recursive: true });
  await writeFile(join(app, 'package.json'), APP_MANIFEST);
  // verbatimSymlinks: node_modules/.bin links stay relative, into the app's own copy.
  await cp(join(installed, 'node_modules'), join(app, 'node_modules'), { recursive: true, verbatimSymlinks: true });
}

/** Type-checks and builds the app in `app` with its tsconfig.json; a type error fails with tsc's output. */
export async function buildApp(app: string): Promise<void> {
  await run(process.execPath, [join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], { cwd: app }).catch(
    (error: { stdout?: string }) => {
      throw new Error(`the app does not type-check against the package:\n${error.stdout}`);
    },
  );
}
