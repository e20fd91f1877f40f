const res = await fetch("https://api.example.com/config");
export default async () => res.status;
