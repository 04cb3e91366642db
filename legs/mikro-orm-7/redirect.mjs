// Loaded with `node --import=<this file>` (NODE_OPTIONS, set by ./run): every `@mikro-orm/*` import, from any
// file in the repository, resolves from this folder's node_modules (MikroORM 7) instead of the repository's
// (MikroORM 6.6.16). Spawned node processes inherit NODE_OPTIONS, so children run on 7 too.
// `module.registerHooks` (synchronous, in-thread) needs Node.js >= 22.15; the leg runs on its own Node 22.
import { registerHooks } from 'node:module';

/** The packages this leg provides; everything else resolves as usual (from the repository). */
export const LEG_PACKAGES = /^(@mikro-orm\/|reflect-metadata$|dataloader$)/;

// The anchor must be a file that exists: resolution from a missing one silently falls back to 6.6.16.
const anchor = new URL('./package.json', import.meta.url).href;

registerHooks({
  resolve(specifier, context, nextResolve) {
    if (LEG_PACKAGES.test(specifier)) return nextResolve(specifier, { ...context, parentURL: anchor });
    return nextResolve(specifier, context);
  },
});
