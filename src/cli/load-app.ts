import { readFile } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { MikroORM } from '@mikro-orm/core';
import { loadOrmConfig, ORM_CONFIG_MODULES } from '../orm/index.js';
import type { SagaDefinition } from '../saga/define-saga.js';
import type { AnySagaDefinition } from '../saga/registered-saga.js';
import { CliUsageError } from './cli-usage-error.js';
import { allowsTypeScript, configCandidates, firstExisting, typeScriptHint } from './config-lookup.js';
import { type OrmCliSettings, readOrmCliSettings } from './orm-cli-settings.js';
import { canLoadTypeScript, isTypeScriptFile, registerTypeScriptLoader } from './typescript-loader.js';

/** Where the CLI finds the application. */
export interface AppLocation {
  /** The working directory: config paths, `--sagas` paths and package.json `mikro-orm` and `mikro-orm-saga` are read from here. */
  readonly cwd: string;
  /** `--config`: the MikroORM config file. Default: found as the MikroORM CLI finds it ({@link configCandidates}). */
  readonly config?: string;
  /** `--sagas`: modules whose exported saga definitions the CLI knows. Default: package.json `mikro-orm-saga.sagas`. */
  readonly sagas: readonly string[];
  /** Where MikroORM's own log lines go (never stdout, which carries the command's output). */
  readonly log: (line: string) => void;
}

/** MikroORM's drivers for the databases the library supports: an app's config imports the one it lists. */
const DRIVER_PACKAGES = ['@mikro-orm/postgresql', '@mikro-orm/sqlite', '@mikro-orm/better-sqlite', '@mikro-orm/libsql'];

/** The package's entry point, which the app's modules import as `mikro-orm-saga`. */
const PACKAGE_ENTRY = new URL('../index.js', import.meta.url).href;

/** The application the CLI runs against. */
export interface LoadedApp {
  readonly orm: MikroORM;
  readonly sagas: readonly AnySagaDefinition[];
  /** When the config is TypeScript and a saga module compiled, or the other way round: why their entity classes may differ. */
  readonly mixedSources: string | undefined;
}

/** A saga definition as `defineSaga` returns it (frozen, with its steps and start messages). */
function isSagaDefinition(value: unknown): value is SagaDefinition {
  if (typeof value !== 'object' || value === null) return false;
  const candidate = value as Partial<SagaDefinition>;
  return (
    typeof candidate.name === 'string' &&
    typeof candidate.state === 'function' &&
    candidate.steps instanceof Map &&
    candidate.startedBy instanceof Set
  );
}

/** `--sagas`, else package.json `"mikro-orm-saga": { "sagas": "<module>" | ["<module>", ...] }`. */
async function sagaModules(location: AppLocation): Promise<string[]> {
  if (location.sagas.length > 0) return [...location.sagas];
  const manifest = await readFile(join(location.cwd, 'package.json'), 'utf8').then(
    (text) => JSON.parse(text) as { 'mikro-orm-saga'?: { sagas?: string | string[] } },
    () => ({}) as { 'mikro-orm-saga'?: { sagas?: string | string[] } },
  );
  const listed = manifest['mikro-orm-saga']?.sagas;
  return listed === undefined ? [] : [listed].flat();
}

/** Every saga definition exported by the modules; two of one name are refused. */
async function loadSagas(location: AppLocation, modules: readonly string[]): Promise<AnySagaDefinition[]> {
  const byName = new Map<string, AnySagaDefinition>();
  for (const path of modules) {
    const url = pathToFileURL(isAbsolute(path) ? path : join(location.cwd, path)).href;
    const exports = (await import(url)) as Record<string, unknown>;
    const found = Object.values(exports).filter(isSagaDefinition);
    if (found.length === 0) throw new CliUsageError(`${path} exports no saga definition (a value returned by defineSaga).`);
    for (const definition of found) {
      const known = byName.get(definition.name);
      if (known && known !== definition) throw new CliUsageError(`Two saga definitions are named '${definition.name}' in ${path}.`);
      byName.set(definition.name, definition as AnySagaDefinition);
    }
  }
  return [...byName.values()];
}

/** The config file: `--config`, else the first of {@link configCandidates} that exists; and the paths tried. */
function findConfig(location: AppLocation, settings: OrmCliSettings, modules: readonly string[]) {
  const typeScript = () => allowsTypeScript(settings, modules, () => canLoadTypeScript(settings.tsLoader));
  const tried = location.config ? [location.config] : configCandidates(location.cwd, settings, typeScript());
  return { found: firstExisting(location.cwd, tried), tried };
}

/**
 * Loads the application's MikroORM config the way the MikroORM CLI does (same paths, `MIKRO_ORM_CONTEXT_NAME`,
 * `MIKRO_ORM_*` variables; `.env` on MikroORM 6, whose core reads it), a TypeScript config or saga module through
 * the app's TypeScript loader ({@link registerTypeScriptLoader}), opens the ORM with its log sent to
 * `location.log`, and imports the saga definitions.
 */
export async function loadApp(location: AppLocation): Promise<LoadedApp> {
  const settings = readOrmCliSettings(location.cwd);
  const modules = await sagaModules(location);
  const { found, tried } = findConfig(location, settings, modules);
  const typeScript = [found ?? '', ...modules].filter(isTypeScriptFile);
  if (typeScript.length > 0) {
    const preload = [...ORM_CONFIG_MODULES, ...settings.dependencies.filter((name) => DRIVER_PACKAGES.includes(name)), PACKAGE_ENTRY];
    await registerTypeScriptLoader(typeScript[0]!, {
      cwd: location.cwd,
      preferred: settings.tsLoader,
      tsconfig: settings.tsConfigPath,
      preload,
    });
  }
  // No file found: MikroORM 6 still builds a config from MIKRO_ORM_* variables alone, as its CLI does.
  const paths = found === undefined ? tried : [isAbsolute(found) ? found : join(location.cwd, found)];
  const config = await loadOrmConfig(process.env.MIKRO_ORM_CONTEXT_NAME ?? 'default', paths).catch((error: unknown) => {
    const hint = found === undefined && !location.config ? typeScriptHint(location.cwd, settings) : '';
    throw new CliUsageError(
      `No MikroORM config could be loaded from ${tried.join(', ')} (${error instanceof Error ? error.message : String(error)}).${hint} ` +
        'Pass --config <file>, set MIKRO_ORM_CLI_CONFIG, or list it in package.json "mikro-orm": { "configPaths": [...] }.',
    );
  });
  const sagas = await loadSagas(location, modules);
  // A TypeScript config means the app runs from its sources: MikroORM's CLI then prefers `entitiesTs` and `pathTs`.
  const preferTs = found !== undefined && isTypeScriptFile(found) ? { preferTs: true } : {};
  const orm = await MikroORM.init({ ...config, ...preferTs, debug: false, logger: location.log });
  return { orm, sagas, mixedSources: mixedSources(found, modules) };
}

/** Why the saga modules' entity classes may not be the ones the config registered; undefined when both are of one kind. */
function mixedSources(config: string | undefined, modules: readonly string[]): string | undefined {
  const other = config === undefined ? undefined : modules.find((module) => isTypeScriptFile(module) !== isTypeScriptFile(config));
  if (other === undefined) return undefined;
  const kind = (file: string) => (isTypeScriptFile(file) ? 'TypeScript' : 'compiled JavaScript');
  return (
    `The config ${config} is ${kind(config!)} and the saga module ${other} is ${kind(other)}: each loaded its own copy of the ` +
    'entity classes. Give both as TypeScript or both compiled (--config, --sagas).'
  );
}
