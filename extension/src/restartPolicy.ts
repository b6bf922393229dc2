// How often a crashed server is restarted: at most `limit` times within `windowMs`; after that it stays
// stopped until the user restarts it. Pure, unit-tested under Node.

export class RestartPolicy {
  private crashes: number[] = [];

  constructor(private readonly limit = 4, private readonly windowMs = 3 * 60 * 1000) {}

  /** Records a crash at `now` and says whether to restart, with the attempt number within the window. */
  onCrash(now: number): { restart: boolean; attempt: number; limit: number } {
    this.crashes = this.crashes.filter((time) => now - time < this.windowMs);
    this.crashes.push(now);
    const attempt = this.crashes.length;
    return { restart: attempt <= this.limit, attempt, limit: this.limit };
  }

  reset(): void {
    this.crashes = [];
  }
}
