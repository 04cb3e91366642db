import { existsSync } from 'node:fs';
import { register } from 'node:module';
import { isAbsolute, join } from 'node:path';
import { CliUsageError } from './cli-usage-error.js';

/*
 * Loading an application's TypeScript files (its MikroORM config, its saga modules) from the CLI's plain Node
 * process, as MikroORM 7's CLI does (`CLIHelper.registerTypeScriptSupport`): the first TypeScript loader the
 * application has installed registers Node module hooks, then the file is imported. MikroORM 6's CLI knows only
 * ts-node, which hooks `require` and so cannot load an ES-module app's config; the same loaders are tried there,
 * ts-node last. Each loader is registered through its ES-module hooks because the CLI imports with `import()`.
 */

/** A TypeScript loader: the module that registers its hooks, and what to call on it. */
export interface TypeScriptLoader {
  /** Its name, as `MIKRO_ORM_CLI_TS_LOADER` or package.json `mikro-orm.tsLoader` gives it. */
  readonly name: string;
  /** The package to install for it. */
  readonly install: string;
  /** The module that registers it (ES-module hooks): importing it is enough, unless `register` says more. */
  readonly module: string;
  /** The environment variable it reads the app's tsconfig.json from, set before its module is imported. */
  readonly projectVariable?: string;
  /** What registers it, given its imported module (or its URL, for a hooks module); default: the import did. */
  readonly register?: (loaded: unknown, moduleUrl: string, tsconfig: string | undefined) => void;
}

/** The loaders, in the order they are tried: MikroORM 7's (oxc, swc, tsx, jiti, tsimp), then MikroORM 6's ts-node. */
export const TYPESCRIPT_LOADERS: readonly TypeScriptLoader[] = [
  { name: 'oxc', install: '@oxc-node/core', module: '@oxc-node/core/register' },
  { name: 'swc', install: '@swc-node/register @swc/core', module: '@swc-node/register/esm-register', projectVariable: 'SWC_NODE_PROJECT' },
  {
    name: 'tsx',
    install: 'tsx',
    module: 'tsx/esm/api',
    register: (loaded, _url, tsconfig) => {
      (loaded as { register(options: { tsconfig?: string }): unknown }).register(tsconfig ? { tsconfig } : {});
    },
  },
  { name: 'jiti', install: 'jiti', module: 'jiti/register' },
  { name: 'tsimp', install: 'tsimp', module: 'tsimp/import', projectVariable: 'TSIMP_PROJECT' },
  {
    name: 'ts-node',
    install: 'ts-node',
    module: 'ts-node/esm',
    projectVariable: 'TS_NODE_PROJECT',
    // `ts-node/esm` is a hooks module, registered as such; it compiles without type checks, as MikroORM 6 has it.
    register: (_loaded, url) => {
      process.env.TS_NODE_TRANSPILE_ONLY ??= 'true';
      register(url);
    },
  },
];

/** The loader this process registered, if it did. */
let registered: string | undefined;

/** A TypeScript file Node cannot import without a loader. */
export const isTypeScriptFile = (path: string): boolean => /\.([mc]?ts|tsx)$/.test(path);

/**
 * Whether this process already runs TypeScript, by MikroORM's own test (`Utils.detectTypeScriptSupport`):
 * started through a loader (`node --import tsx`, ts-node, swc, oxc), from a `.ts` script, under vitest or
 * ts-jest, or on Bun. Then a TypeScript file is imported as it is, and no loader is registered.
 */
export function runsTypeScript(): boolean {
  const loaderFlag = /ts-node|@swc-node\/register|(^|[/=])tsx(\/|$)|@oxc-node\/core|jiti|tsimp/;
  return (
    registered !== undefined ||
    process.argv[0]?.endsWith('ts-node') === true ||
    process.env.VITEST !== undefined ||
    process.env.TS_JEST !== undefined ||
    process.versions.bun !== undefined ||
    process.argv.slice(1, 2).some((arg) => isTypeScriptFile(arg)) ||
    process.execArgv.some((arg) => loaderFlag.test(arg))
  );
}

/** Where `module` resolves from the CLI's installation (the app's node_modules), or undefined when it is not installed. */
function resolveModule(module: string): string | undefined {
  try {
    return import.meta.resolve(module);
  } catch {
    return undefined;
  }
}

/**
 * The loader to register: `preferred` (a name of {@link TYPESCRIPT_LOADERS}) when given, else the first one
 * installed; undefined when none is. `resolve` says where a module is, or undefined when it is not installed.
 * @throws CliUsageError when `preferred` is not a loader's name, or is not installed.
 */
export function chooseLoader(
  preferred: string | undefined,
  resolve: (module: string) => string | undefined = resolveModule,
): { loader: TypeScriptLoader; url: string } | undefined {
  const names = TYPESCRIPT_LOADERS.map((l) => l.name).join(', ');
  const candidates = preferred === undefined ? TYPESCRIPT_LOADERS : TYPESCRIPT_LOADERS.filter((l) => l.name === preferred);
  if (candidates.length === 0)
    throw new CliUsageError(`MIKRO_ORM_CLI_TS_LOADER (or mikro-orm.tsLoader) '${preferred}' is not one of ${names}.`);
  for (const loader of candidates) {
    const url = resolve(loader.module);
    if (url !== undefined) return { loader, url };
  }
  if (preferred !== undefined)
    throw new CliUsageError(`The TypeScript loader '${preferred}' is not installed: npm i -D ${candidates[0]!.install}.`);
  return undefined;
}

/** Whether a loader is installed (or this process runs TypeScript already): whether a `.ts` config can be loaded. */
export function canLoadTypeScript(preferred: string | undefined): boolean {
  return runsTypeScript() || chooseLoader(preferred) !== undefined;
}

/** Where and how {@link registerTypeScriptLoader} registers a loader. */
export interface LoaderRequest {
  /** The app's folder. */
  readonly cwd: string;
  /** The loader to register (a name of {@link TYPESCRIPT_LOADERS}); undefined for the first installed. */
  readonly preferred: string | undefined;
  /** The app's tsconfig.json, relative to `cwd`. */
  readonly tsconfig: string;
  /** Modules the command loads anyway, imported before the hooks: see {@link registerTypeScriptLoader}. */
  readonly preload: readonly string[];
}

/**
 * Makes `file` (a TypeScript file) importable: registers the loader `request.preferred` names, else the first one
 * installed, once per process; nothing when this process runs TypeScript already. The modules of `request.preload`
 * are imported first: a loader's hooks run for every module loaded after them (on Node 22, where tsx hooks
 * `require` too, MikroORM 7's and the driver's hundreds of files), and those need none.
 * @throws CliUsageError when no loader is installed, naming the file and what to install.
 */
export async function registerTypeScriptLoader(file: string, request: LoaderRequest): Promise<void> {
  if (runsTypeScript()) return;
  const chosen = chooseLoader(request.preferred);
  if (!chosen) {
    throw new CliUsageError(
      `${file} is TypeScript and no TypeScript loader is installed: npm i -D tsx (or one of ${TYPESCRIPT_LOADERS.map((l) => l.name).join(', ')}), or give the compiled JavaScript file.`,
    );
  }
  // A module that fails here is left for the app's own import of it to report.
  for (const module of request.preload) await import(module).catch(() => undefined);
  const { loader, url } = chosen;
  const project = isAbsolute(request.tsconfig) ? request.tsconfig : join(request.cwd, request.tsconfig);
  const tsconfig = existsSync(project) ? project : undefined;
  if (loader.projectVariable && tsconfig) process.env[loader.projectVariable] ??= tsconfig;
  const loaded = loader.name === 'ts-node' ? undefined : await import(url);
  loader.register?.(loaded, url, tsconfig);
  registered = loader.name;
}
