import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * The MikroORM CLI settings the `mikro-orm-saga` CLI reads, each from its environment variable, else from
 * package.json `"mikro-orm"` (the nearest package.json at or above the working directory, as MikroORM reads it).
 * MikroORM 6 and 7 name the TypeScript switch differently; both names are read on both majors.
 */
export interface OrmCliSettings {
  /** `MIKRO_ORM_CLI_CONFIG`: the config file, tried first. */
  readonly configFromEnv: string | undefined;
  /** `mikro-orm.configPaths`: config files to try next, in order. */
  readonly configPaths: readonly string[];
  /** False when `MIKRO_ORM_CLI_PREFER_TS` / `preferTs` (7) or `MIKRO_ORM_CLI_USE_TS_NODE` / `useTsNode` (6) is false. */
  readonly preferTs: boolean;
  /** `MIKRO_ORM_CLI_ALWAYS_ALLOW_TS` / `alwaysAllowTs`: TypeScript config paths are tried even with no loader installed. */
  readonly alwaysAllowTs: boolean;
  /** `MIKRO_ORM_CLI_TS_LOADER` / `tsLoader`: the loader to register; undefined (or `auto`) for the first installed. */
  readonly tsLoader: string | undefined;
  /** `MIKRO_ORM_CLI_TS_CONFIG_PATH` / `tsConfigPath`. Default `tsconfig.json`. */
  readonly tsConfigPath: string;
  /** The names of the package's `dependencies` and `devDependencies`. */
  readonly dependencies: readonly string[];
}

type PackageSettings = {
  configPaths?: unknown;
  preferTs?: unknown;
  useTsNode?: unknown;
  alwaysAllowTs?: unknown;
  tsLoader?: unknown;
  tsConfigPath?: unknown;
};

interface Manifest {
  'mikro-orm'?: PackageSettings;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
}

/** The nearest package.json at or above `dir`; `{}` when there is none or it is not JSON. */
function nearestManifest(dir: string): Manifest {
  for (let at = dir; ; at = dirname(at)) {
    const file = join(at, 'package.json');
    if (existsSync(file)) {
      try {
        const manifest = JSON.parse(readFileSync(file, 'utf8')) as unknown;
        return typeof manifest === 'object' && manifest !== null ? (manifest as Manifest) : {};
      } catch {
        return {};
      }
    }
    if (dirname(at) === at) return {};
  }
}

const objectOr = <T extends object>(value: unknown): Partial<T> => (typeof value === 'object' && value !== null ? (value as T) : {});

/** A boolean setting as MikroORM reads one: the variable when set (`true`, `t`, `1` are true), else package.json's. */
function flag(variable: string | undefined, setting: unknown): boolean | undefined {
  if (variable !== undefined) return ['true', 't', '1'].includes(variable.toLowerCase());
  return typeof setting === 'boolean' ? setting : undefined;
}

const textOf = (variable: string | undefined, setting: unknown) => variable ?? (typeof setting === 'string' ? setting : undefined);

/** The settings for an app in `cwd`, from `env` (the process's) and package.json. */
export function readOrmCliSettings(cwd: string, env: NodeJS.ProcessEnv = process.env): OrmCliSettings {
  const manifest = nearestManifest(cwd);
  const pkg = objectOr<PackageSettings>(manifest['mikro-orm']);
  const configFromEnv = env.MIKRO_ORM_CLI_CONFIG || undefined;
  const off = flag(env.MIKRO_ORM_CLI_PREFER_TS, pkg.preferTs) === false || flag(env.MIKRO_ORM_CLI_USE_TS_NODE, pkg.useTsNode) === false;
  const loader = textOf(env.MIKRO_ORM_CLI_TS_LOADER, pkg.tsLoader);
  return {
    configFromEnv,
    configPaths: Array.isArray(pkg.configPaths) ? pkg.configPaths.filter((p): p is string => typeof p === 'string') : [],
    preferTs: !off,
    alwaysAllowTs: flag(env.MIKRO_ORM_CLI_ALWAYS_ALLOW_TS, pkg.alwaysAllowTs) === true,
    tsLoader: loader === 'auto' ? undefined : loader,
    tsConfigPath: textOf(env.MIKRO_ORM_CLI_TS_CONFIG_PATH, pkg.tsConfigPath) ?? 'tsconfig.json',
    dependencies: [...Object.keys(objectOr(manifest.dependencies)), ...Object.keys(objectOr(manifest.devDependencies))],
  };
}
