import { readFile } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { MikroORM } from '@mikro-orm/core';
import { loadOrmConfig, ormConfigPaths } from '../orm/index.js';
import type { SagaDefinition } from '../saga/define-saga.js';
import type { AnySagaDefinition } from '../saga/registered-saga.js';
import { CliUsageError } from './cli-usage-error.js';

/** Where the CLI finds the application. */
export interface AppLocation {
  /** The working directory: `--sagas` paths and package.json `mikro-orm-saga` are read from here (MikroORM's own config discovery reads `process.cwd()`, which the CLI's is). */
  readonly cwd: string;
  /** `--config`: the MikroORM config file. Default: found as the MikroORM CLI finds it. */
  readonly config?: string;
  /** `--sagas`: modules whose exported saga definitions the CLI knows. Default: package.json `mikro-orm-saga.sagas`. */
  readonly sagas: readonly string[];
  /** Where MikroORM's own log lines go (never stdout, which carries the command's output). */
  readonly log: (line: string) => void;
}

/** The application the CLI runs against. */
export interface LoadedApp {
  readonly orm: MikroORM;
  readonly sagas: readonly AnySagaDefinition[];
}

/**
 * The config paths, in the MikroORM CLI's order: `--config`, else `MIKRO_ORM_CLI_CONFIG`, package.json
 * `mikro-orm.configPaths`, `./src/mikro-orm.config.ts` and `./mikro-orm.config.ts` (when TypeScript is allowed),
 * `./dist/mikro-orm.config.js` (or build/, src/), `./mikro-orm.config.js`.
 */
async function configPaths(location: AppLocation): Promise<string[]> {
  return location.config ? [location.config] : await ormConfigPaths();
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
async function loadSagas(location: AppLocation): Promise<AnySagaDefinition[]> {
  const byName = new Map<string, AnySagaDefinition>();
  for (const path of await sagaModules(location)) {
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

/**
 * Loads the application's MikroORM config the way the MikroORM CLI does (same paths, `MIKRO_ORM_CONTEXT_NAME`,
 * `MIKRO_ORM_*` variables; `.env` on MikroORM 6, whose core reads it), opens the ORM with its log sent to `location.log`, and imports the saga definitions.
 */
export async function loadApp(location: AppLocation): Promise<LoadedApp> {
  const paths = await configPaths(location);
  const config = await loadOrmConfig(process.env.MIKRO_ORM_CONTEXT_NAME ?? 'default', paths).catch((error: unknown) => {
    throw new CliUsageError(
      `No MikroORM config could be loaded from ${paths.join(', ')} (${error instanceof Error ? error.message : String(error)}). ` +
        'Pass --config <file>, set MIKRO_ORM_CLI_CONFIG, or list it in package.json "mikro-orm": { "configPaths": [...] }.',
    );
  });
  const sagas = await loadSagas(location);
  const orm = await MikroORM.init({ ...config, debug: false, logger: location.log });
  return { orm, sagas };
}
