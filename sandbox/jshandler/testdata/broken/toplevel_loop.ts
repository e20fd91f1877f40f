for (;;) {}
export default async () => 1;
