import { deferred } from './suite.js';

/** Counts the gated steps that started and lets them all go on at once (units reach their write phase together). */
export class StepGate {
  private entered = 0;
  readonly all = deferred();
  readonly go = deferred();
  constructor(private readonly expected: number) {}
  async enter(): Promise<void> {
    if (++this.entered === this.expected) this.all.resolve();
    await this.go.promise;
  }
}
