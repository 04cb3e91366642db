import { existsSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import type { OrmCliSettings } from './orm-cli-settings.js';
import { isTypeScriptFile } from './typescript-loader.js';

/** The default TypeScript config files, tried when TypeScript is allowed. */
const TYPESCRIPT_DEFAULTS = ['./src/mikro-orm.config.ts', './mikro-orm.config.ts'];

/**
 * The config files to try, in MikroORM's CLI order: `MIKRO_ORM_CLI_CONFIG`, package.json `mikro-orm.configPaths`,
 * `./src/mikro-orm.config.ts` and `./mikro-orm.config.ts` when `typeScript`, then `./dist/mikro-orm.config.js`
 * (`./build/` when there is no dist/ folder, `./src/` when there is neither) and `./mikro-orm.config.js`.
 * Without `typeScript`, TypeScript files are left out of the whole list.
 */
export function configCandidates(cwd: string, settings: OrmCliSettings, typeScript: boolean): string[] {
  const folder = existsSync(join(cwd, 'dist')) ? 'dist' : existsSync(join(cwd, 'build')) ? 'build' : 'src';
  const paths = [
    ...(settings.configFromEnv === undefined ? [] : [settings.configFromEnv]),
    ...settings.configPaths,
    ...(typeScript ? TYPESCRIPT_DEFAULTS : []),
    `./${folder}/mikro-orm.config.js`,
    './mikro-orm.config.js',
  ];
  return [...new Set(paths)].filter((path) => typeScript || !isTypeScriptFile(path));
}

/**
 * Whether TypeScript config paths are tried: `MIKRO_ORM_CLI_CONFIG` names a TypeScript file; else not when a saga
 * module is compiled JavaScript (its entity classes are the compiled ones, which only the compiled config
 * registers); else when `alwaysAllowTs` is set, or TypeScript is not switched off (`preferTs`/`useTsNode` false)
 * and `canLoad()` (a loader is installed, or the process runs TypeScript).
 */
export function allowsTypeScript(settings: OrmCliSettings, sagaModules: readonly string[], canLoad: () => boolean): boolean {
  if (settings.configFromEnv !== undefined && isTypeScriptFile(settings.configFromEnv)) return true;
  if (sagaModules.some((module) => !isTypeScriptFile(module))) return false;
  return settings.alwaysAllowTs || (settings.preferTs && canLoad());
}

/** The first of `paths` (relative to `cwd`) that exists, as given; undefined when none does. */
export function firstExisting(cwd: string, paths: readonly string[]): string | undefined {
  return paths.find((path) => existsSync(isAbsolute(path) ? path : join(cwd, path)));
}

/** Why no config was found when TypeScript was not tried: a default TypeScript config that exists, and what to do. */
export function typeScriptHint(cwd: string, settings: OrmCliSettings): string {
  const found = firstExisting(cwd, TYPESCRIPT_DEFAULTS);
  if (found === undefined) return '';
  const why = settings.preferTs
    ? 'no TypeScript loader is installed (npm i -D tsx)'
    : 'TypeScript is switched off (preferTs / useTsNode false)';
  return ` ${found} exists but was not tried: ${why}.`;
}
