// The layering of src, checked by `npm run lint` (dependency-cruiser). From the bottom up:
//   src/orm          the only code that knows MikroORM's two majors and their SQL layers; reached through src/orm/index.ts
//   src/entities     the library's tables
//   src/sql          the library's statements: SQL, no saga logic
//   src/schema       the schema check
//   src/saga         the runtime (SagaRuntime and its unit of work)
//   src/dispatcher   timers and the outbox relay, on top of the runtime
//   src/operations, src/testing, src/cli   on top of both
// src/contracts.ts holds the types the runtime and the dispatcher hand each other. Imports of types count too.

/** MikroORM's SQL layers and the drivers under them: only src/orm may use them. */
const SQL_LAYERS = [
  '(^|(^|/)node_modules/)@mikro-orm/(knex|sql|postgresql|sqlite|better-sqlite|libsql)(/|$)',
  '(^|(^|/)node_modules/)(knex|kysely|pg|better-sqlite3|sqlite3|libsql)(/|$)',
];

/**
 * Packages that are no peer dependency of the library: an app on the other MikroORM major does not have them
 * (@mikro-orm/knex is 6's SQL layer, @mikro-orm/sql 7's, @mikro-orm/decorators 7's decorators).
 */
const NOT_PEER_DEPENDENCIES = ['(^|(^|/)node_modules/)@mikro-orm/(knex|sql|decorators)(/|$)'];

/** A layering rule: modules whose path matches `from` import none whose path matches `to`. */
function below(name, comment, from, to) {
  return { name, comment, severity: 'error', from: { path: from }, to: { path: to } };
}

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'A module never depends on itself through others, not even for a type.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'no-orphans',
      comment: 'Every module is imported, or imports something: a module nothing uses is dead code.',
      severity: 'error',
      from: { orphan: true },
      to: {},
    },
    below(
      'entities-import-no-runtime',
      "The library's entities are the bottom layer: they know no statement, runtime, dispatcher or operation.",
      '^src/entities/',
      '^src/(sql|schema|saga|dispatcher|operations|testing|cli)/',
    ),
    below(
      'sql-imports-no-saga-logic',
      'The statements take plain values; what a saga or a timer means is decided above them.',
      '^src/sql/',
      '^src/(schema|saga|timers|dispatcher|operations|testing|cli)/',
    ),
    below(
      'schema-imports-no-runtime',
      'The schema check reads entities and the catalog; the runtime calls it, not the other way round.',
      '^src/schema/',
      '^src/(saga|dispatcher|operations|testing|cli)/',
    ),
    below(
      'runtime-imports-no-dispatcher',
      'The dispatcher delivers timers through the runtime; the runtime knows nothing of it (shared types: src/contracts.ts).',
      '^src/saga/',
      '^src/(dispatcher|operations|testing|cli)/',
    ),
    {
      name: 'orm-through-its-index',
      comment:
        'Outside src/orm, the library reaches MikroORM compatibility code through src/orm/index.ts only (the runner also through src/orm/sql-execution.ts).',
      severity: 'error',
      from: { path: '^(src|migrations)/', pathNot: '^src/orm/' },
      to: { path: '^src/orm/', pathNot: '^src/orm/(index|sql-execution)\\.ts$' },
    },
    {
      name: 'statements-run-by-the-runner',
      comment:
        "Only the runner (src/sql/sql-executor.ts) imports the ORM's execution functions (executeSql, queryRows, kept out of src/orm/index.ts): every other statement is a builder it runs.",
      severity: 'error',
      from: { pathNot: '^src/(orm/|sql/sql-executor\\.ts$)' },
      to: { path: '^src/orm/sql-execution\\.ts$' },
    },
    {
      name: 'sql-layers-only-in-orm',
      comment: "Only src/orm talks to MikroORM's SQL layer (knex on 6, kysely on 7) and the drivers.",
      severity: 'error',
      from: { pathNot: '^src/orm/' },
      to: { path: SQL_LAYERS },
    },
    {
      name: 'peer-dependencies-only',
      comment: 'Not even src/orm imports a MikroORM package that is no peer dependency: it is missing on one major.',
      severity: 'error',
      from: {},
      to: { path: NOT_PEER_DEPENDENCIES },
    },
    {
      name: 'no-unresolvable',
      comment: 'Every import resolves here, on MikroORM 6; a package only 7 has is not imported.',
      severity: 'error',
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    // Type-only imports are dependencies too: a cycle of types is a cycle.
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    doNotFollow: { path: 'node_modules' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      mainFields: ['module', 'main', 'types', 'typings'],
    },
  },
};
