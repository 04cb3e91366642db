// One file per library migration, named after it (docs/migrations.md, "Beside your own migrations").
import { sagaMigration } from 'mikro-orm-saga/migrations';

export const Migration20261201230000 = sagaMigration('postgresql', 'Migration20261201230000');
