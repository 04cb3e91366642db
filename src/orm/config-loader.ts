import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Options } from '@mikro-orm/core';
import * as core from '@mikro-orm/core';

/*
 * Loading the application's MikroORM config file as MikroORM's own CLI does (the CLI finds the file:
 * src/cli/config-lookup.ts). MikroORM 6 has this in core (`ConfigurationLoader`); 7 moved it to `@mikro-orm/cli`
 * (`searchConfiguration`) and core keeps only `loadEnvironmentVars`. A namespace import keeps the module loadable on both majors.
 */

/** The slice of MikroORM 6's `ConfigurationLoader` the CLI uses. */
interface ConfigurationLoader6 {
  getConfiguration(contextName: string, paths: string[]): Promise<{ getAll(): Options }>;
}

/** The slice of `@mikro-orm/cli` 7 the CLI uses. */
interface Cli7 {
  searchConfiguration(exports: unknown, contextName: string, path: string): Promise<Options>;
}

/** The modules {@link loadOrmConfig} imports besides the config: `@mikro-orm/cli` on MikroORM 7. */
export const ORM_CONFIG_MODULES: readonly string[] = 'ConfigurationLoader' in core ? [] : ['@mikro-orm/cli'];

function loader6(): ConfigurationLoader6 | undefined {
  return (core as unknown as { ConfigurationLoader?: ConfigurationLoader6 }).ConfigurationLoader;
}

async function cli7(): Promise<Cli7> {
  try {
    return (await import('@mikro-orm/cli')) as unknown as Cli7;
  } catch (error) {
    throw new Error('MikroORM 7 finds its config through @mikro-orm/cli: install it (npm i -D @mikro-orm/cli).', { cause: error });
  }
}

/**
 * The options of the first config file of `paths` that exists, for `contextName` (`'default'` matches a config
 * without one), merged with the `MIKRO_ORM_*` environment variables, as MikroORM's CLI reads them.
 * @throws Error when no file of `paths` exists or none of its configs has that context name.
 */
export async function loadOrmConfig(contextName: string, paths: readonly string[]): Promise<Options> {
  const loader = loader6();
  if (loader) return (await loader.getConfiguration(contextName, [...paths])).getAll();
  const cli = await cli7();
  const path = paths.map((p) => resolve(p)).find((p) => existsSync(p));
  if (!path) throw new Error(`MikroORM config file not found in ['${paths.join("', '")}']`);
  const exports = (await import(pathToFileURL(path).href)) as { default?: unknown };
  const options = await cli.searchConfiguration(await (exports.default ?? exports), contextName, path);
  const env = (core as unknown as { loadEnvironmentVars(): Partial<Options> }).loadEnvironmentVars();
  return core.Utils.mergeConfig({}, options, env) as Options;
}
