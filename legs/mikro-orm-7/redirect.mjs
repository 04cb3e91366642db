// Loaded with `node --import=<this file>` (NODE_OPTIONS, set by ./run): every `@mikro-orm/*` import, from any
// file in the repository, resolves from this folder's node_modules (MikroORM 7) instead of the repository's
// (MikroORM 6.6.16). Spawned node processes inherit NODE_OPTIONS, so children run on 7 too.
// `module.registerHooks` (synchronous, in-thread) needs Node.js >= 22.15; the leg runs on its own Node 22.
import { registerHooks } from 'node:module';

/** The packages this leg provides; everything else resolves as usual (from the repository). */
export const LEG_PACKAGES = /^(@mikro-orm\/|reflect-metadata$|dataloader$)/;

// The anchor must be a file that exists: resolution from a missing one silently falls back to 6.6.16.
const anchor = new URL('./package.json', import.meta.url).href;
const legModules = new URL('./node_modules/', import.meta.url).href;

registerHooks({
  resolve(specifier, context, nextResolve) {
    if (!LEG_PACKAGES.test(specifier)) return nextResolve(specifier, context);
    const resolved = nextResolve(specifier, { ...context, parentURL: anchor });
    // A package the leg lacks (say @mikro-orm/knex, gone in 7) would be found in the repository's 6.6.16 copy:
    // not found instead, so nothing of 6 loads beside 7 (MikroORM's CLI version check then skips it too).
    if (!resolved.url.startsWith(legModules)) {
      throw Object.assign(new Error(`Cannot find package '${specifier}' in the MikroORM 7 leg`), { code: 'ERR_MODULE_NOT_FOUND' });
    }
    return resolved;
  },
});
