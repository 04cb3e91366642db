// The whole suite on MikroORM 7: the repository's vitest config, with every `@mikro-orm/*` import resolved from
// this folder and the ES-decorator fixtures lowered by TypeScript. Run it through ./run (`npm run test:v7`), which
// also puts Node 22 first in PATH and sets NODE_OPTIONS so spawned processes load 7 as well.
import { fileURLToPath } from 'node:url';
import { mergeConfig, type Plugin } from 'vite';
import { defineConfig } from 'vitest/config';
import { lowerEsDecorators } from '../../test/support/lower-es-decorators.js';
import base from '../../vitest.config.js';

const leg = fileURLToPath(new URL('.', import.meta.url));
// The anchor must be a file that exists: resolution from a missing one silently falls back to 6.6.16.
const anchor = `${leg}package.json`;
const LEG_PACKAGES = /^(@mikro-orm\/|reflect-metadata$|dataloader$)/;
/** Fixtures written with TC39 (ES) decorators; Oxc, vite's transformer, does not lower those (docs/integration.md). */
const ES_DECORATOR_FILES = /\/test\/fixtures\/v7\/es-[^/]*\.ts$/;

const resolveFromLeg: Plugin = {
  name: 'mikro-orm-7-leg:resolve',
  enforce: 'pre',
  async resolveId(source, _importer, options) {
    if (!LEG_PACKAGES.test(source)) return null;
    const resolved = await this.resolve(source, anchor, { ...options, skipSelf: true });
    // As in redirect.mjs: a package the leg lacks is not taken from the repository's 6.6.16 copy.
    if (resolved && !resolved.id.startsWith(`${leg}node_modules/`)) this.error(`Cannot find package '${source}' in the MikroORM 7 leg`);
    return resolved;
  },
};

export default mergeConfig(
  base,
  defineConfig({
    root: fileURLToPath(new URL('../..', import.meta.url)),
    plugins: [resolveFromLeg, lowerEsDecorators(ES_DECORATOR_FILES)],
    test: { env: { MIKRO_ORM_LEG: '7' } },
  }),
);
