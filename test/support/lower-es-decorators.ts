// The vitest plugin docs/integration.md ("ES decorators under vitest") shows, verbatim between the markers
// (test/docs/examples.test.ts keeps them equal). The MikroORM 7 leg's vitest config runs the ES-decorator
// fixtures through it; test/schema/entity-styles.test.ts pins why it is needed.
// docs begin
import ts from 'typescript';
import type { Plugin } from 'vite';

/** Lowers TC39 (ES) decorators with TypeScript: Oxc, Vite 8's transformer, leaves them in and Node cannot parse them. */
export const lowerEsDecorators = (include: RegExp): Plugin => ({
  name: 'lower-es-decorators',
  enforce: 'pre',
  transform(code, id) {
    if (!include.test(id)) return null;
    const { outputText, sourceMapText } = ts.transpileModule(code, {
      fileName: id,
      compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, experimentalDecorators: false, sourceMap: true },
    });
    return { code: outputText, map: sourceMapText ? JSON.parse(sourceMapText) : null };
  },
});
// docs end
